"""A chat request with `tools` is refused as vLLM refuses it when the server has no tool
parser (`--enable-auto-tool-choice` and `--tool-call-parser`), and served when it has one
(sparksim/tool_choice.py; tests/conformance/test_tool_choice.py compares with real vLLM)."""

from argparse import Namespace

import httpx
import pytest

from sparksim.openai_requests import ApiError
from sparksim.tool_choice import ToolParsing, check_tool_parser, requested_tool_choice
from tests.sparksim.conftest import NEMOTRON_FLAGS

HI = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# vLLM 0.33's words (vllm/renderers/online_renderer.py, OnlineRenderer.render_chat).
AUTO_NEEDS_PARSER = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)
PARSER_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")


def chat(sim, **fields) -> httpx.Response:
    body = {"model": sim.model, "messages": HI, "max_tokens": 4, **fields}
    return httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=30)


def refused(response: httpx.Response, message: str, param=None) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}
    }


def served(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"]  # prose: sparksim makes no tool calls


def test_tools_without_a_tool_parser_are_refused_in_vllms_words(fast_sim):
    refused(chat(fast_sim, tools=[TOOL]), AUTO_NEEDS_PARSER)  # tool_choice unset: "auto"
    refused(chat(fast_sim, tools=[TOOL], tool_choice="auto"), AUTO_NEEDS_PARSER)
    refused(chat(fast_sim, tools=[TOOL], stream=True), AUTO_NEEDS_PARSER)  # before the stream
    refused(chat(fast_sim, tools=[TOOL], tool_choice="required"),
            'tool_choice="required" requires --tool-call-parser to be set')  # fmt: skip
    refused(chat(fast_sim, tools=[TOOL], tool_choice=NAMED),
            'tool_choice=function "get_weather" requires --tool-call-parser to be set')  # fmt: skip
    # The refusal comes before the chat template (an empty conversation's own error).
    refused(chat(fast_sim, tools=[TOOL], messages=[]), AUTO_NEEDS_PARSER)


def test_tool_choice_none_or_null_is_served_without_a_tool_parser(fast_sim):
    served(chat(fast_sim, tools=[TOOL], tool_choice="none"))
    served(chat(fast_sim, tools=[TOOL], tool_choice=None))
    served(chat(fast_sim, tool_choice="none"))
    # /v1/completions is no chat endpoint: vLLM ignores tools there.
    body = {"model": fast_sim.model, "prompt": "Hi", "max_tokens": 2, "tools": [TOOL]}
    assert httpx.post(fast_sim.url + "/v1/completions", json=body, timeout=30).status_code == 200


def test_malformed_tool_choices_are_refused_as_vllms_request_model_refuses_them(fast_sim):
    refused(chat(fast_sim, tools=[]),
            "`tools` must not be an empty array. Either provide at least one tool or omit the "
            "field entirely. (parameter=tools)", "tools")  # fmt: skip
    refused(chat(fast_sim, tool_choice="required"),
            "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)",
            "tool_choice")  # fmt: skip
    refused(chat(fast_sim, tools=[TOOL], tool_choice="bogus"),
            'Invalid value for `tool_choice`: bogus! Only named tools, "none", "auto" or '
            '"required" are supported. (parameter=tool_choice)', "tool_choice")  # fmt: skip
    refused(chat(fast_sim, tools=[TOOL], tool_choice={"type": "function", "function": {"name": "x"}}),
            "The tool specified in `tool_choice` does not match any of the specified `tools` "
            "(parameter=tool_choice)", "tool_choice")  # fmt: skip


def test_with_a_tool_parser_every_tool_choice_is_served(start_sim):
    sim = start_sim(*NEMOTRON_FLAGS, *PARSER_FLAGS, time_scale=20)
    served(chat(sim, tools=[TOOL]))
    served(chat(sim, tools=[TOOL], tool_choice="auto"))
    served(chat(sim, tools=[TOOL], tool_choice="required"))
    served(chat(sim, tools=[TOOL], tool_choice=NAMED))
    served(chat(sim, tools=[TOOL], tool_choice="none"))
    # The request model's checks stay.
    assert chat(sim, tools=[]).status_code == 400


def test_a_tool_call_parser_without_enable_auto_tool_choice_is_no_tool_parser(start_sim):
    # vLLM selects no parser class unless both flags are given (ParserManager.get_tool_parser).
    sim = start_sim(*NEMOTRON_FLAGS, "--tool-call-parser", "hermes", time_scale=20)
    refused(chat(sim, tools=[TOOL]), AUTO_NEEDS_PARSER)
    refused(chat(sim, tools=[TOOL], tool_choice="required"),
            'tool_choice="required" requires --tool-call-parser to be set')  # fmt: skip


@pytest.mark.parametrize(
    ("args", "architecture", "available"),
    [
        (Namespace(), "LlamaForCausalLM", False),
        (Namespace(enable_auto_tool_choice=True, tool_call_parser="hermes"), "", True),
        (Namespace(tool_call_parser="hermes"), "", False),
        # vLLM's two exceptions: Harmony (gpt-oss) and the Mistral tokenizer parse tools.
        (Namespace(), "GptOssForCausalLM", True),
        (Namespace(tokenizer_mode="mistral"), "", True),
    ],
)
def test_which_servers_have_a_tool_parser(args, architecture, available):
    tools = ToolParsing.from_args(args, architecture)
    assert tools.available is available
    choice = requested_tool_choice({"tools": [TOOL]})
    assert choice == "auto"
    if available:
        check_tool_parser(choice, tools)
    else:
        with pytest.raises(ApiError):
            check_tool_parser(choice, tools)

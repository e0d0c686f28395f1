"""`tools` and `tool_choice` of a chat request, checked as vLLM checks them.

Two places in vLLM 0.33 (identical in 0.32, which tests/conformance runs):

1. `ChatCompletionRequest.check_tool_usage` (vllm/entrypoints/openai/chat_completion/
   protocol.py, a pydantic "before" validator, so before the model is looked up): an empty
   `tools` list, a `tool_choice` without `tools`, an unknown `tool_choice` value and a named
   function that no tool defines are refused as VLLMValidationError (400, "BadRequestError",
   with the parameter). `tools` without `tool_choice` means "auto"; "none" needs nothing.
2. `OnlineRenderer.render_chat` (vllm/renderers/online_renderer.py, after the model check,
   before the chat template): without a tool parser a `tool_choice` other than None and
   "none" is refused with a plain 400 BadRequestError (param null) — "auto" with
   `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be
   set`, "required" and a named function with `tool_choice=... requires --tool-call-parser
   to be set`. vLLM has a tool parser only when both `--enable-auto-tool-choice` and
   `--tool-call-parser` are given (`ParserManager.get_tool_parser`); the Mistral tokenizer
   and gpt-oss (Harmony) parse tool calls themselves and skip the check.

The request is then served as any other: sparksim generates no tool calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparksim.openai_requests import ApiError, vllm_validation

# vLLM's `hf_config.model_type == "gpt_oss"` (use_harmony), as the architecture names it.
HARMONY_ARCHITECTURES = frozenset({"GptOssForCausalLM"})
_CORRECT_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


@dataclass(frozen=True)
class ToolParsing:
    """What the server was started with that decides whether a tool choice can be parsed."""

    auto_tools: bool = False  # --enable-auto-tool-choice
    parser: str | None = None  # --tool-call-parser
    builtin: bool = False  # a Mistral tokenizer or gpt-oss's Harmony format

    @classmethod
    def from_args(cls, args, architecture_name: str = "") -> ToolParsing:
        return cls(
            auto_tools=bool(getattr(args, "enable_auto_tool_choice", False)),
            parser=getattr(args, "tool_call_parser", None) or None,
            builtin=getattr(args, "tokenizer_mode", None) == "mistral"
            or architecture_name in HARMONY_ARCHITECTURES,
        )

    @property
    def available(self) -> bool:
        # vLLM selects no tool parser class unless both flags are given.
        return self.builtin or bool(self.auto_tools and self.parser)


def requested_tool_choice(body: dict):
    """The request's effective tool_choice after vLLM's `check_tool_usage` (raises its
    VLLMValidationError where it does): "none" when absent without tools, "auto" when
    absent with tools, None when sent as null."""
    tools = body.get("tools")
    if tools == []:
        raise vllm_validation(
            "`tools` must not be an empty array. "
            "Either provide at least one tool or omit the field entirely.",
            "tools",
        )
    if "tool_choice" not in body:
        return "auto" if tools else "none"
    choice = body["tool_choice"]
    if choice == "none" or choice is None:
        return choice
    if tools is None:
        raise vllm_validation("When using `tool_choice`, `tools` must be set.", "tool_choice")
    if choice not in ("auto", "required") and not isinstance(choice, dict):
        raise vllm_validation(
            f"Invalid value for `tool_choice`: {choice}! "
            'Only named tools, "none", "auto" or "required" are supported.',
            "tool_choice",
        )
    if isinstance(choice, dict):
        function = choice.get("function")
        if not isinstance(function, dict):
            raise vllm_validation(
                f"Invalid value for `function`: `{function}` in `tool_choice`! {_CORRECT_USAGE}",
                "tool_choice.function",
            )
        if "name" not in function:
            raise vllm_validation(
                f"Expected field `name` in `function` in `tool_choice`! {_CORRECT_USAGE}",
                "tool_choice.function.name",
            )
        name = function["name"]
        if not isinstance(name, str) or not name:
            raise vllm_validation(
                f"Invalid `name` in `function`: `{name}` in `tool_choice`! {_CORRECT_USAGE}",
                "tool_choice.function.name",
            )
        if name not in _tool_names(tools):
            raise vllm_validation(
                "The tool specified in `tool_choice` does not match any of the specified `tools`",
                "tool_choice",
            )
    return choice


def _tool_names(tools) -> list[str]:
    names = []
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict):
            names.append(function.get("name"))
    return names


def check_tool_parser(choice, tools: ToolParsing) -> None:
    """vLLM's `render_chat` refusal of a tool choice that no tool parser can answer."""
    if tools.available or choice in (None, "none"):
        return
    if choice == "auto":
        if not tools.auto_tools:
            raise ApiError(
                400,
                '"auto" tool choice requires '
                "--enable-auto-tool-choice and --tool-call-parser to be set",
            )
        return
    if isinstance(choice, dict):
        described = f'function "{choice["function"]["name"]}"'
    else:
        described = f'"{choice}"'
    raise ApiError(400, f"tool_choice={described} requires --tool-call-parser to be set")

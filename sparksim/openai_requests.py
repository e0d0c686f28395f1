"""Reading and validating the OpenAI requests as vLLM does: the JSON body, the chat
messages, the completion fields in vLLM's order, and the errors in vLLM's (and FastAPI's)
shapes, messages and status codes."""

from __future__ import annotations

import json
import uuid

from sparksim.engine import SimRequest
from sparksim.tokenizer import Tokenizer

ECHO_PREFIX = "/sparksim echo "
MAX_BODY = 16 * 1024 * 1024
REASONING_SHARE = 4  # with a reasoning parser, the first quarter of the output (≤ 64)


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param=None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status,
            }
        }


def vllm_validation(message: str, param: str | None = None, value=None) -> ApiError:
    """vLLM's VLLMValidationError: a 400 BadRequestError whose message ends with
    "(parameter=..., value=...)" when it names them."""
    extras = [f"parameter={param}"] if param is not None else []
    if value is not None:
        extras.append(f"value={value}")
    if extras:
        message = f"{message} ({', '.join(extras)})"
    return ApiError(400, message, "BadRequestError", param)


def _input_repr(value) -> str:
    if isinstance(value, dict):
        return f"<dict of {len(value)} items>"
    if isinstance(value, list):
        return f"<list of {len(value)} items>"
    return str(value)


def request_validation(*errors: tuple[str, str, str, object] | tuple) -> ApiError:
    """FastAPI's request validation error as vLLM answers it: type "Bad Request", the
    first error's location as param, and pydantic's errors in the message. Each error is
    (loc, type, msg, input[, ctx])."""
    lines = []
    for loc, kind, msg, value, *ctx in errors:
        detail = {"type": kind, "loc": loc, "msg": msg, "input": _input_repr(value)}
        if ctx:
            detail["ctx"] = ctx[0]
        lines.append(f"  {detail!r}")
    count = f"{len(errors)} validation error" + ("s" if len(errors) > 1 else "")
    return ApiError(400, count + ":\n" + "\n".join(lines), "Bad Request", errors[0][0])


def _int_field(body: dict, name: str) -> int | None:
    """An optional integer field, refused as pydantic refuses a non-integer."""
    value = body.get(name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        raise request_validation(
            (
                f"body.{name}",
                "int_parsing",
                "Input should be a valid integer, unable to parse string as an integer",
                value,
            )
        )
    raise request_validation((f"body.{name}", "int_type", "Input should be a valid integer", value))


async def read_body(receive) -> dict:
    """The request's JSON object (at most MAX_BODY bytes), refused as FastAPI refuses."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(400, "client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise ApiError(413, "Request body too large.", "RequestTooLarge")
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except json.JSONDecodeError as exc:
        # FastAPI's answer: the offset where decoding failed, in pydantic's words.
        raise request_validation(
            (f"body.{exc.pos}", "json_invalid", "JSON decode error", {}, {"error": exc.msg})
        ) from None
    if not isinstance(body, dict):
        raise request_validation(
            (
                "body",
                "model_attributes_type",
                "Input should be a valid dictionary or object to extract fields from",
                body,
            )
        )
    return body


def chat_messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if messages is None:
        raise request_validation(("body.messages", "missing", "Field required", body))
    if not isinstance(messages, list):
        raise request_validation(
            ("body.messages", "list_type", "Input should be a valid list", messages)
        )
    if not messages:
        raise ApiError(
            400,
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            # vLLM lists one error per message type it tried; the first is enough here.
            raise request_validation(
                (
                    f"body.messages.{i}.ChatCompletionDeveloperMessageParam.role",
                    "missing",
                    "Field required",
                    message,
                )
            )
    return messages


def stream_options(body: dict) -> dict:
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise request_validation(
            (
                "body.stream_options",
                "model_attributes_type",
                "Input should be a valid dictionary or object to extract fields from",
                options,
            )
        )
    return options


def scripted_answer(body: dict, tokenizer: Tokenizer) -> list[int] | None:
    """Test hook: a last user message "/sparksim echo TEXT" is answered with TEXT,
    verbatim (tokenized as a model would), so tests can make the "model" say anything —
    hostile markup included."""
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    content = last.get("content") if last.get("role") == "user" else None
    if isinstance(content, str) and content.startswith(ECHO_PREFIX):
        return tokenizer.encode(content[len(ECHO_PREFIX) :]) or None
    return None


def _requested_max_tokens(body: dict, limit: int, *, chat: bool) -> int | None:
    """Chat: max_completion_tokens wins over the deprecated max_tokens. Completions:
    max_tokens, 16 when absent (OpenAI's and vLLM's default); chat has no default."""
    param = "max_tokens"
    requested = _int_field(body, "max_tokens")
    if chat and _int_field(body, "max_completion_tokens") is not None:
        param, requested = "max_completion_tokens", body["max_completion_tokens"]
    if not chat and requested is None:
        requested = 16
    if requested is not None and requested > limit:
        raise vllm_validation(
            f"{param}={requested} cannot be greater than max_model_len={limit}. "
            "Please request fewer output tokens.",
            param,
            requested,
        )
    return requested


def _check_prompt_fits(prompt_ids: list[int], limit: int) -> None:
    if len(prompt_ids) > limit:
        count = len(prompt_ids)
        qualifier = "at least " if count == limit + 1 else ""
        raise vllm_validation(
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains {qualifier}{count} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
            count,
        )


def _check_temperature(body: dict) -> None:
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        return
    if not isinstance(temperature, int | float) or isinstance(temperature, bool):
        raise request_validation(
            (
                "body.temperature",
                "float_parsing",
                "Input should be a valid number, unable to parse string as a number",
                temperature,
            )
        )
    if temperature < 0:
        raise vllm_validation(
            f"temperature must be non-negative, got {float(temperature)}.",
            "temperature",
            float(temperature),
        )
    if temperature > 2:
        raise vllm_validation(
            f"temperature must be in [0, 2], got {float(temperature)}.",
            "temperature",
            float(temperature),
        )


def _min_tokens(body: dict, max_tokens: int) -> int:
    min_tokens = _int_field(body, "min_tokens") or 0
    if min_tokens < 0:
        raise vllm_validation(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if min_tokens > max_tokens:
        raise vllm_validation(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."
        )
    return min_tokens


def sim_request(
    body: dict,
    prompt_ids: list[int],
    *,
    chat: bool,
    max_model_len: int,
    reasoning: bool,
    tokenizer: Tokenizer,
    answers: str = "prose",
    model: str = "",
) -> SimRequest:
    """Validate as vLLM does, in its order (request fields, then the prompt against the
    context, then the sampling parameters), with its messages and params."""
    limit = max_model_len
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, "sparksim serves n=1 only.", param="n")
    requested = _requested_max_tokens(body, limit, chat=chat)
    _check_prompt_fits(prompt_ids, limit)
    # What is left of the context caps the answer (vLLM's get_max_tokens): a request
    # for more is served, and ends with finish_reason "length".
    max_tokens = limit - len(prompt_ids)
    if requested is not None:
        max_tokens = min(max_tokens, requested)
    _check_temperature(body)
    if max_tokens < 1:
        raise vllm_validation(
            f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens
        )
    min_tokens = _min_tokens(body, max_tokens)
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise ApiError(400, "'cache_salt' must be a non-empty string.", param="cache_salt")
    seed = body.get("seed")
    return SimRequest(
        request_id=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=bool(body.get("ignore_eos", False)),
        cache_salt=salt,
        seed=seed if isinstance(seed, int) else None,
        scripted=scripted_answer(body, tokenizer) if chat else None,
        reasoning_tokens=min(max_tokens // REASONING_SHARE, 64) if chat and reasoning else 0,
        answers=answers,
        model=model,
    )

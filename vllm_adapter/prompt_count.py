"""How many prompt tokens a request made vLLM process, when its answer never said.

A streamed answer carries its usage only in its last chunk (``stream_options.include_usage``,
which the relays force on): a stream the client leaves early, the chat's Stop, a stall
time-out or a server failure mid-answer end without it. The prompt was prefilled all the
same — on a Spark the expensive part — so a relay that counted only the tokens it saw
would let anyone read a long prompt for free by closing after the first token.

- `tokenize_request(path, payload, served_name)`: the ``POST /tokenize`` body that makes
  vLLM count this request's prompt exactly as it did for the request itself: for chat the
  same messages through the same chat template (``add_generation_prompt``,
  ``continue_final_message``, ``chat_template_kwargs``, ``tools`` carried over — vLLM's
  ``TokenizeChatRequest``), for completions the same prompt text (``TokenizeCompletionRequest``;
  vLLM 0.32/0.33, ``entrypoints/serve/tokenize/protocol.py``). ``None`` when no call is
  needed (a prompt given as token ids is counted here) or possible.
- `tokenized_count(body)`: the ``count`` of vLLM's ``TokenizeResponse``.
- `estimate(payload)`: the fallback when the server cannot be asked (it is gone, or
  failed): the prompt's text in UTF-8 bytes divided by `BYTES_PER_TOKEN_ESTIMATE`.
- `prompt_tokens(...)`: the whole rule — ask, add up, else estimate — with the caller's
  own HTTP client passed in as `tokenize`.

No I/O of its own and no Django: the gateway (apps/gateway/asgi.py) and the chat
(apps/chat/consumers.py) send the requests with their own clients.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = [
    "BYTES_PER_TOKEN_ESTIMATE",
    "MAX_PROMPTS",
    "estimate",
    "prompt_tokens",
    "tokenize_request",
    "tokenized_count",
]

# English text is about 4 bytes per token with the tokenizers Spark models use; 3 leans
# towards counting more (code, numbers and other scripts are denser). Only the fallback.
BYTES_PER_TOKEN_ESTIMATE = 3
# A completions request may carry a batch of prompts (one /tokenize call each).
MAX_PROMPTS = 16
# What a chat request carries that changes how vLLM renders its prompt.
_CHAT_RENDERING = (
    "add_generation_prompt",
    "continue_final_message",
    "add_special_tokens",
    "chat_template",
    "chat_template_kwargs",
    "tools",
    "mm_processor_kwargs",
    "media_io_kwargs",
)


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    )


def tokenize_request(
    path: str, payload: dict[str, Any], served_name: str
) -> tuple[list[bytes], int] | None:
    """The /tokenize bodies to send (one per prompt text) and the tokens already known
    (prompts given as token ids), or None for a request that is not chat or completions."""
    if path.endswith("/chat/completions"):
        messages = payload.get("messages")
        if not isinstance(messages, list):
            return None
        body: dict[str, Any] = {"model": served_name, "messages": messages}
        for key in _CHAT_RENDERING:
            if key in payload:
                body[key] = payload[key]
        return [json.dumps(body, separators=(",", ":")).encode()], 0
    if path.endswith("/completions"):
        prompt = payload.get("prompt")
        if isinstance(prompt, str) or _is_token_ids(prompt):
            prompts = [prompt]
        elif isinstance(prompt, list) and len(prompt) <= MAX_PROMPTS:
            prompts = prompt
        else:
            return None
        bodies, known = [], 0
        for one in prompts:
            if _is_token_ids(one):
                known += len(one)
            elif isinstance(one, str):
                body = {"model": served_name, "prompt": one}
                if "add_special_tokens" in payload:
                    body["add_special_tokens"] = payload["add_special_tokens"]
                bodies.append(json.dumps(body, separators=(",", ":")).encode())
            else:
                return None
        return bodies, known
    return None


def tokenized_count(body: bytes) -> int | None:
    """``count`` of a /tokenize answer, or None when the answer is not one."""
    try:
        count = json.loads(body).get("count")
    except (ValueError, AttributeError):
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


def _text_bytes(value: Any, depth: int = 0) -> int:
    """The UTF-8 bytes of every string inside `value` (messages, content parts, tools)."""
    if depth > 32:
        return 0
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, list):
        return sum(_text_bytes(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return sum(_text_bytes(v, depth + 1) for v in value.values())
    return 0


def estimate(payload: dict[str, Any]) -> int:
    """The prompt's tokens, estimated from its text (token ids counted as they are)."""
    prompt = payload.get("prompt")
    if _is_token_ids(prompt):
        return len(prompt)
    if isinstance(prompt, list) and prompt and all(_is_token_ids(p) for p in prompt):
        return sum(len(p) for p in prompt)
    size = _text_bytes(payload.get("messages")) + _text_bytes(prompt)
    size += _text_bytes(payload.get("tools"))
    # The Responses API's input (a string or messages) and instructions.
    size += _text_bytes(payload.get("input")) + _text_bytes(payload.get("instructions"))
    return -(-size // BYTES_PER_TOKEN_ESTIMATE)


async def prompt_tokens(
    path: str,
    payload: dict[str, Any],
    served_name: str,
    tokenize: Callable[[bytes], Awaitable[bytes | None]],
    *,
    timeout_s: float,
) -> tuple[int, bool]:
    """The prompt tokens of a request whose answer never said: vLLM counts them again
    (`tokenize(body)` sends one /tokenize body with the caller's client and returns a 200
    answer's bytes, or None when there was none), all within `timeout_s`; else the
    estimate. Returns the count and whether the server counted it."""
    asked = tokenize_request(path, payload, served_name)
    if asked is not None:
        bodies, total = asked
        try:
            async with asyncio.timeout(timeout_s):
                for body in bodies:
                    answer = await tokenize(body)
                    count = tokenized_count(answer) if answer is not None else None
                    if count is None:
                        break
                    total += count
                else:
                    return total, True
        except TimeoutError:
            pass
    return estimate(payload), False

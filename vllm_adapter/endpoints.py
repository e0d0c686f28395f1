"""What the panel sends to a vLLM server's HTTP API, and how it reads the answers.

One definition of the paths, the request bodies and the answer fields; no HTTP client
(each caller keeps its own: the runner's warm-up, the chat relay, the benchmark harness,
the host agent's scraper, sparksim's probe). Shapes as vLLM 0.32/0.33 define them
(``vllm/entrypoints/serve/tokenize/protocol.py``, ``serve/engine/protocol.py``,
``serve/instrumentator/basic.py``, ``openai/chat_completion/protocol.py``):

- ``GET /health``: 200 with an empty body once the engine is up (503 when it died);
- ``GET /version``: ``{"version": "0.33.0"}`` (sparksim adds ``"simulated": true``);
- ``GET /v1/models``: ``{"object": "list", "data": [{"id": <served name>, ...}]}``;
- ``POST /tokenize``: ``{"model", "prompt", "add_special_tokens"}`` or ``{"model",
  "messages", "add_generation_prompt"}`` → ``{"count", "max_model_len", "tokens",
  "token_strs"}``;
- ``POST /detokenize``: ``{"model", "tokens"}`` → ``{"prompt"}``;
- ``POST /v1/chat/completions``, ``POST /v1/completions``: OpenAI bodies; streamed
  answers are read with ``vllm_adapter.sse``;
- ``GET /metrics``: Prometheus text (mounted so that ``/metrics`` answers without a
  redirect), read with ``vllm_adapter.metrics``;
- errors: ``{"error": {"message", "type", "param", "code"}}`` (``error_message``).

A server started with an API key (``--api-key K`` or, as the panel starts it, the
environment variable ``VLLM_API_KEY``; ``serve/middleware/register.py``) demands
``Authorization: Bearer K`` (the scheme in any case) on every path under
``GUARDED_PREFIXES`` and answers 401 ``{"error": "Unauthorized"}`` otherwise
(``serve/middleware/authenticate.py``); OPTIONS, ``/health``, ``/metrics``, ``/version``,
``/tokenize`` and ``/detokenize`` are not guarded.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "API_KEY_ENV",
    "CHAT_COMPLETIONS",
    "COMPLETIONS",
    "DETOKENIZE",
    "ERROR_TEXT_MAX",
    "GUARDED_PREFIXES",
    "HEALTH",
    "METRICS",
    "MODELS",
    "STREAM_HEADERS",
    "TOKENIZE",
    "UNAUTHORIZED_BODY",
    "VERSION",
    "bearer",
    "chat_body",
    "completion_body",
    "detokenize_body",
    "detokenized",
    "error_message",
    "is_guarded",
    "model_ids",
    "server_version",
    "stream_options",
    "token_count",
    "tokenize_body",
    "tokenize_chat_body",
    "url",
]

HEALTH = "/health"
VERSION = "/version"
MODELS = "/v1/models"
TOKENIZE = "/tokenize"
DETOKENIZE = "/detokenize"
CHAT_COMPLETIONS = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
METRICS = "/metrics"

API_KEY_ENV = "VLLM_API_KEY"
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
UNAUTHORIZED_BODY = {"error": "Unauthorized"}


def is_guarded(path: str) -> bool:
    """Whether a server with an API key demands it on `path`."""
    return path.startswith(GUARDED_PREFIXES)


def bearer(header: str | None) -> str | None:
    """The key in an Authorization header as vLLM reads it (`Bearer <key>`, the scheme
    in any case), or None."""
    if not header:
        return None
    scheme, _, key = header.partition(" ")
    return key if scheme.lower() == "bearer" else None


# Headers of a streamed request (the body is sent pre-serialised by the harness).
STREAM_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}
ERROR_TEXT_MAX = 300


def url(base: str, path: str) -> str:
    """``base`` (``http://host:port``, with or without a trailing slash) + ``path``."""
    return base.rstrip("/") + path


# --- request bodies ----------------------------------------------------------------------


def stream_options(*, continuous: bool = False) -> dict:
    """``stream_options`` asking for the final usage chunk; with ``continuous`` every
    chunk carries its running usage too (vLLM's ``continuous_usage_stats``)."""
    options: dict[str, bool] = {"include_usage": True}
    if continuous:
        options["continuous_usage_stats"] = True
    return options


def _sampling(
    body: dict,
    stream: bool,
    continuous_usage: bool,
    max_tokens: int | None,
    sampling: dict[str, Any],
) -> dict:
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    body.update((k, v) for k, v in sampling.items() if v is not None)
    if stream:
        body["stream"] = True
        body["stream_options"] = stream_options(continuous=continuous_usage)
    return body


def chat_body(
    model: str,
    messages: list[dict],
    *,
    max_tokens: int | None = None,
    stream: bool = False,
    continuous_usage: bool = False,
    **sampling: Any,
) -> dict:
    """A ``/v1/chat/completions`` body. ``sampling``: further fields as vLLM names them
    (``temperature``, ``top_p``, ``min_tokens``, ``ignore_eos``, ``cache_salt``...);
    None values are left out. A streamed body asks for usage (``stream_options``)."""
    body = {"model": model, "messages": messages}
    return _sampling(body, stream, continuous_usage, max_tokens, sampling)


def completion_body(
    prompt: str | list[int],
    *,
    model: str | None = None,
    max_tokens: int | None = None,
    stream: bool = False,
    continuous_usage: bool = False,
    **sampling: Any,
) -> dict:
    """A ``/v1/completions`` body (``prompt``: text or token ids). Without ``model`` the
    server uses its only model."""
    body: dict[str, Any] = {"prompt": prompt}
    if model is not None:
        body = {"model": model, **body}
    return _sampling(body, stream, continuous_usage, max_tokens, sampling)


def tokenize_body(model: str, prompt: str, *, add_special_tokens: bool = True) -> dict:
    return {"model": model, "prompt": prompt, "add_special_tokens": add_special_tokens}


def tokenize_chat_body(
    model: str, messages: list[dict], *, add_generation_prompt: bool = True
) -> dict:
    """Count the chat-templated length of ``messages`` (with the assistant's opening when
    ``add_generation_prompt``: what a chat request's prompt is)."""
    return {"model": model, "messages": messages, "add_generation_prompt": add_generation_prompt}


def detokenize_body(model: str, tokens: list[int]) -> dict:
    return {"model": model, "tokens": tokens}


# --- reading answers ---------------------------------------------------------------------


def model_ids(answer: dict) -> list[str]:
    """The served model names a ``/v1/models`` answer lists."""
    return [str(m["id"]) for m in answer.get("data") or () if isinstance(m, dict) and "id" in m]


def server_version(answer: dict) -> str:
    """The version a ``/version`` answer gives; sparksim's is marked "(sparksim)"."""
    version = str(answer.get("version", ""))
    return f"{version} (sparksim)" if answer.get("simulated") else version


def token_count(answer: dict) -> int:
    """The ``count`` of a ``/tokenize`` answer (KeyError/ValueError when it has none)."""
    return int(answer["count"])


def detokenized(answer: dict) -> str:
    """The text of a ``/detokenize`` answer."""
    return str(answer["prompt"])


def error_message(body: Any) -> str:
    """The message of an error answer, at most ``ERROR_TEXT_MAX`` characters.

    ``body``: the parsed JSON (vLLM's ``{"error": {"message"}}``, FastAPI's
    ``{"detail"}``, a bare ``{"message"}``), raw bytes or text (parsed here when it is
    JSON; an HTML page or plain text is returned as it is, stripped)."""
    if isinstance(body, bytes | bytearray):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return body.strip()[:ERROR_TEXT_MAX]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            for key in ("message", "detail"):
                if error.get(key):
                    return str(error[key])[:ERROR_TEXT_MAX]
        elif isinstance(error, str) and error:
            return error[:ERROR_TEXT_MAX]
        return json.dumps(body)[:ERROR_TEXT_MAX]
    return str(body).strip()[:ERROR_TEXT_MAX]

"""The OpenAI-compatible HTTP API of the simulated vLLM server (a bare ASGI app).

Endpoints as vLLM V1 serves them: /health, /v1/models (ready only after start-up),
/version, /load, /metrics, /tokenize, /detokenize, /v1/chat/completions and
/v1/completions (streaming and not), plus /sparksim/stats (timing accuracy) and
/sparksim/trace (ground truth for load generators: when each token-bearing SSE chunk of a
streamed request was written). Errors use vLLM's JSON shape and status codes.
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import hashlib
import itertools
import json
import logging
import os
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field

from sparksim import __version__
from sparksim.engine import Engine, Event, SimRequest
from sparksim.faults import Faults, Http500Gate, TokenCrashCounter, mangle_metrics
from sparksim.metrics import CONTENT_TYPE, VllmMetrics
from sparksim.tokenizer import DEFAULT_TOKENIZER, apply_chat_template
from vllm_adapter import contract as vllm_contract

ECHO_PREFIX = "/sparksim echo "

log = logging.getLogger("sparksim.api")
# The vLLM version imitated unless the server is told another (`--vllm-version`).
VLLM_VERSION = vllm_contract.latest_version()
MAX_BODY = 16 * 1024 * 1024
COMPACT = (",", ":")  # vLLM writes JSON without spaces
REASONING_SHARE = 4  # with a reasoning parser, the first quarter of the output (≤ 64)
TRACE_LIMIT = 10_000  # streamed requests whose chunk times /sparksim/trace keeps...
TRACE_CHUNKS_MAX = 4_000_000  # ...and chunks in all (12 bytes each: ~48 MB at most)
TRACE_IDS_MAX = 1_000  # ids per /sparksim/trace?ids=... query


class Trace:
    """When the server wrote each token-bearing SSE chunk of one streamed request.

    Times are `time.monotonic()` taken right after the chunk was handed to the transport
    (CLOCK_MONOTONIC is system-wide on Linux, so a client on the same machine can compare
    its own receive times with them), with the number of tokens in each chunk; compact
    arrays, since a long benchmark streams millions of chunks. `started_at` is when the
    response began (the request parsed and queued).
    """

    __slots__ = ("started_at", "times", "tokens")

    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self.times = array.array("d")
        self.tokens = array.array("I")

    def to_dict(self, request_id: str) -> dict:
        times = self.times
        return {
            "id": request_id,
            "started_at": self.started_at,
            "chunks": [[t, n] for t, n in zip(times, self.tokens, strict=True)],
            "first_token_at": times[0] if times else None,
            "last_token_at": times[-1] if times else None,
        }


class TraceStore:
    """The traces of the last `limit` streamed requests, by response id; the oldest are
    dropped first, also while more than `max_chunks` chunks are stored in all."""

    def __init__(self, limit: int = TRACE_LIMIT, max_chunks: int = TRACE_CHUNKS_MAX):
        self.limit = limit
        self.max_chunks = max_chunks
        self.chunks = 0
        self._traces: collections.OrderedDict[str, Trace] = collections.OrderedDict()

    def start(self, request_id: str) -> Trace:
        traces = self._traces
        while traces and (len(traces) >= self.limit or self.chunks > self.max_chunks):
            _, old = traces.popitem(last=False)
            self.chunks -= len(old.times)
        trace = traces[request_id] = Trace()
        return trace

    def add(self, trace: Trace, tokens: int) -> None:
        """One token-bearing chunk of `trace` has just been written."""
        trace.times.append(time.monotonic())
        trace.tokens.append(tokens)
        self.chunks += 1

    def get(self, request_id: str) -> Trace | None:
        return self._traces.get(request_id)

    def recent(self, n: int) -> list[str]:
        """The ids of the newest `n` traces, oldest first (in the order the responses began)."""
        newest = itertools.islice(reversed(self._traces), max(n, 0))
        return list(newest)[::-1]

    def __len__(self) -> int:
        return len(self._traces)


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


@dataclass
class ServerState:
    model: str
    served_names: list[str]
    max_model_len: int
    faults: Faults
    metrics: VllmMetrics | None = None
    engine: Engine | None = None
    ready: bool = False
    reasoning: bool = False
    started: float = field(default_factory=time.time)
    gate: Http500Gate = field(init=False)
    crash: TokenCrashCounter = field(init=False)
    time_scale: float = 1.0
    traces: TraceStore = field(default_factory=TraceStore)
    vllm_version: str = VLLM_VERSION

    def __post_init__(self) -> None:
        self.gate = Http500Gate(self.faults.http500_fraction, seed=1)
        self.crash = TokenCrashCounter(self.faults.crash_after_tokens)

    @property
    def fingerprint(self) -> str:
        """vLLM's system_fingerprint shape: vllm-<version>-<8 hex of the config's hash>."""
        config = f"{self.model}\0{self.max_model_len}".encode()
        return f"vllm-{self.vllm_version}-{hashlib.sha256(config).hexdigest()[:8]}"


def _permission(created: float) -> dict:
    """The one entry vLLM lists under a model's "permission"."""
    return {
        "id": f"modelperm-{uuid.uuid4().hex[:16]}",
        "object": "model_permission",
        "created": int(created),
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }


class App:
    def __init__(self, state: ServerState):
        self.state = state
        self.tokenizer = DEFAULT_TOKENIZER

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        try:
            handler = ROUTES.get((method, path))
            if handler is None:
                # Not vLLM's error shape but FastAPI's, as vLLM answers an unknown route.
                status = 405 if any(p == path for _, p in ROUTES) else 404
                detail = "Method Not Allowed" if status == 405 else "Not Found"
                await _json(send, status, {"detail": detail})
                return
            await handler(self, scope, receive, send)
        except ApiError as exc:
            await _json(send, exc.status, exc.body())

    # --- plain endpoints --------------------------------------------------------------
    async def health(self, scope, receive, send) -> None:
        await _raw(send, 200, b"", None)  # vLLM: an empty 200 without a content type

    async def models(self, scope, receive, send) -> None:
        if not self.state.ready:
            raise ApiError(503, "The model is still loading.", "ServiceUnavailableError")
        data = [
            {
                "id": name,
                "object": "model",
                "created": int(self.state.started),
                "owned_by": "vllm",
                "root": self.state.model,
                "parent": None,
                "max_model_len": self.state.max_model_len,
                "permission": [_permission(self.state.started)],
            }
            for name in self.state.served_names
        ]
        await _json(send, 200, {"object": "list", "data": data})

    async def version(self, scope, receive, send) -> None:
        # The one place the simulator admits what it is.
        await _json(
            send,
            200,
            {"version": self.state.vllm_version, "simulated": True, "sparksim": __version__},
        )

    async def load(self, scope, receive, send) -> None:
        engine = self.state.engine
        await _json(send, 200, {"server_load": engine.load if engine else 0})

    async def metrics(self, scope, receive, send) -> None:
        if self.state.metrics is None:
            raise ApiError(503, "The model is still loading.", "ServiceUnavailableError")
        body = self.state.metrics.render()
        if self.state.faults.metrics_mode:
            body = mangle_metrics(body.decode(), self.state.faults.metrics_mode).encode()
        await _raw(send, 200, body, CONTENT_TYPE)

    async def stats(self, scope, receive, send) -> None:
        engine = self._engine()
        query = scope.get("query_string", b"").decode()
        summary = engine.timing.summary()
        if "reset=1" in query:
            engine.timing.reset()
        await _json(send, 200, {"simulated": True, "time_scale": self.state.time_scale, **summary})

    async def trace(self, scope, receive, send) -> None:
        """`?id=X` → one trace (404 if unknown); `?ids=a,b,c` → `{"traces": {id: trace},
        "missing": [ids]}`; `?recent=N` → `{"ids": [...]}`, the ids of the newest N traces,
        oldest first (for a client that never saw the response ids, e.g. behind a proxy)."""
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode())
        store = self.state.traces
        if "recent" in query:
            try:
                n = int(query["recent"][0])
            except ValueError:
                n = -1
            if not 1 <= n <= TRACE_IDS_MAX:
                raise ApiError(400, f"'recent' must be 1 to {TRACE_IDS_MAX}.", param="recent")
            await _json(send, 200, {"ids": store.recent(n)})
            return
        if "ids" in query:
            ids = [i for value in query["ids"] for i in value.split(",") if i]
            if len(ids) > TRACE_IDS_MAX:
                raise ApiError(400, f"At most {TRACE_IDS_MAX} ids per query.", param="ids")
            found, missing = {}, []
            for request_id in ids:
                trace = store.get(request_id)
                if trace is None:
                    missing.append(request_id)
                else:
                    found[request_id] = trace.to_dict(request_id)
            await _json(send, 200, {"traces": found, "missing": missing})
            return
        if "id" not in query:
            raise ApiError(400, "Give ?id=<response id> or ?ids=a,b,c.", param="id")
        request_id = query["id"][0]
        trace = store.get(request_id)
        if trace is None:
            raise ApiError(
                404, f"No trace for {request_id!r} (unknown, not streamed, or evicted).",
                "NotFoundError", "id",
            )  # fmt: skip
        await _json(send, 200, trace.to_dict(request_id))

    async def tokenize(self, scope, receive, send) -> None:
        body = await _body(receive)
        self._check_model(body)
        if "messages" in body:
            text = apply_chat_template(
                _messages(body), add_generation_prompt=bool(body.get("add_generation_prompt", True))
            )
        elif isinstance(body.get("prompt"), str):
            text = body["prompt"]
        else:
            raise request_validation(
                ("body.prompt", "missing", "Field required", body),
                ("body.messages", "missing", "Field required", body),
            )
        tokens = self.tokenizer.encode(text)
        await _json(
            send,
            200,
            {
                "count": len(tokens),
                "max_model_len": self.state.max_model_len,
                "tokens": tokens,
                "token_strs": None,
            },
        )

    async def detokenize(self, scope, receive, send) -> None:
        body = await _body(receive)
        self._check_model(body)
        tokens = body.get("tokens")
        if tokens is None:
            raise request_validation(("body.tokens", "missing", "Field required", body))
        if not isinstance(tokens, list):
            raise request_validation(
                ("body.tokens", "list_type", "Input should be a valid list", tokens)
            )
        for i, t in enumerate(tokens):
            if not isinstance(t, int) or isinstance(t, bool) or t < 0:
                raise request_validation(
                    (f"body.tokens.{i}", "int_type", "Input should be a valid integer", t)
                )
        # vLLM's tokenizer skips ids outside the vocabulary (an empty string for them).
        known = [t for t in tokens if t < self.tokenizer.vocab_size]
        await _json(send, 200, {"prompt": self.tokenizer.decode(known)})

    # --- completions -------------------------------------------------------------------
    async def chat(self, scope, receive, send) -> None:
        body = await _body(receive)
        name = self._check_model(body)
        text = apply_chat_template(_messages(body), add_generation_prompt=True)
        ids = self.tokenizer.encode(text)[: self.state.max_model_len + 1]  # as vLLM truncates
        await self._complete(body, name, ids, send, receive, chat=True)

    async def completions(self, scope, receive, send) -> None:
        body = await _body(receive)
        name = self._check_model(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if isinstance(prompt, str) and prompt:
            # vLLM tokenizes a text prompt to at most max_model_len + 1 tokens.
            ids = self.tokenizer.encode(prompt)[: self.state.max_model_len + 1]
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            ids = list(prompt)
        elif prompt is None or prompt == "" or prompt == []:
            raise vllm_validation(
                "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
            )
        else:
            raise ApiError(400, "'prompt' must be a string or a list of token ids.")
        await self._complete(body, name, ids, send, receive, chat=False)

    async def _complete(self, body, name, prompt_ids, send, receive, *, chat: bool) -> None:
        engine = self._engine()
        if self.state.gate.should_fail():
            raise ApiError(
                500,
                "Internal server error (sparksim fault injection: http500)",
                "InternalServerError",
            )
        request = self._sim_request(body, prompt_ids, chat=chat)
        stream = bool(body.get("stream", False))
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
        engine.submit(request)
        watcher = asyncio.create_task(_watch_disconnect(receive, engine, request))
        try:
            if stream:
                await self._stream(send, request, name, chat=chat, options=options)
            else:
                await self._whole(send, request, name, chat=chat)
        finally:
            watcher.cancel()
            engine.abort(request)  # no-op when it finished

    def _scripted(self, body: dict) -> list[int] | None:
        """Test hook: a last user message "/sparksim echo TEXT" is answered with TEXT,
        verbatim (tokenized as a model would), so tests can make the "model" say anything —
        hostile markup included."""
        messages = body.get("messages") or []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        content = last.get("content") if last.get("role") == "user" else None
        if isinstance(content, str) and content.startswith(ECHO_PREFIX):
            return self.tokenizer.encode(content[len(ECHO_PREFIX) :]) or None
        return None

    def _sim_request(self, body: dict, prompt_ids: list[int], *, chat: bool) -> SimRequest:
        """Validate as vLLM does, in its order (request fields, then the prompt against the
        context, then the sampling parameters), with its messages and params."""
        limit = self.state.max_model_len
        n = body.get("n", 1)
        if n != 1:
            raise ApiError(400, "sparksim serves n=1 only.", param="n")
        # Chat: max_completion_tokens wins over the deprecated max_tokens. Completions:
        # max_tokens, 16 when absent (OpenAI's and vLLM's default); chat has no default.
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
        # What is left of the context caps the answer (vLLM's get_max_tokens): a request
        # for more is served, and ends with finish_reason "length".
        max_tokens = limit - len(prompt_ids)
        if requested is not None:
            max_tokens = min(max_tokens, requested)
        temperature = body.get("temperature", 1.0)
        if temperature is not None:
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
        if max_tokens < 1:
            raise vllm_validation(
                f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens
            )
        min_tokens = _int_field(body, "min_tokens") or 0
        if min_tokens < 0:
            raise vllm_validation(
                f"min_tokens must be greater than or equal to 0, got {min_tokens}."
            )
        if min_tokens > max_tokens:
            raise vllm_validation(
                f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                f"got {min_tokens}."
            )
        salt = body.get("cache_salt")
        if salt is not None and (not isinstance(salt, str) or not salt):
            raise ApiError(400, "'cache_salt' must be a non-empty string.", param="cache_salt")
        seed = body.get("seed")
        reasoning = min(max_tokens // REASONING_SHARE, 64) if chat and self.state.reasoning else 0
        scripted = self._scripted(body) if chat else None
        return SimRequest(
            request_id=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
            prompt_ids=prompt_ids,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=bool(body.get("ignore_eos", False)),
            cache_salt=salt,
            seed=seed if isinstance(seed, int) else None,
            scripted=scripted,
            reasoning_tokens=reasoning,
        )

    async def _stream(
        self, send, request: SimRequest, name: str, *, chat: bool, options: dict
    ) -> None:
        """vLLM's chunk sequence: (chat) a role chunk, one chunk per token whose last one
        carries the finish_reason, (include_usage) a usage chunk with no choices, then
        [DONE]. system_fingerprint rides on the last chunk before [DONE]."""
        include_usage = bool(options.get("include_usage"))
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        traces = self.state.traces
        trace = traces.start(request.request_id)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )

        def usage(completion: int, details: bool) -> dict:
            # Counted as streamed, like vLLM's per-output counts: the engine may already
            # have produced tokens this stream has not sent yet.
            out = {
                "prompt_tokens": request.prompt_len,
                "total_tokens": request.prompt_len + completion,
                "completion_tokens": completion,
            }
            if details:  # vLLM's per-chunk chat usage has this key, its final one not
                out["completion_tokens_details"] = None
            return out

        async def chunk(
            choice: dict | None,
            *,
            tokens: int = 0,
            extra: dict | None = None,
            with_usage: bool = False,
            last: bool = False,
        ) -> None:
            payload = {
                "id": request.request_id,
                "object": obj,
                "created": created,
                "model": name,
                "choices": [choice] if choice is not None else [],
            }
            if with_usage:
                payload["usage"] = usage(sent + tokens, chat and choice is not None)
            if extra:
                payload.update(extra)
            if last:
                payload["system_fingerprint"] = self.state.fingerprint
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + json.dumps(payload, separators=COMPACT).encode() + b"\n\n",
                    "more_body": True,
                }
            )
            if tokens:
                traces.add(trace, tokens)

        sent = 0
        stalled = False
        faults = self.state.faults
        pending: Event | None = None
        role_sent = False
        while True:
            event: Event = pending or await request.events.get()
            pending = None
            if event.kind == "finish":  # only when no token came (an abort)
                if request.aborted:
                    return
                break
            # The engine queues the finish event right behind the last token: vLLM sends
            # that token's text and the finish_reason in one chunk.
            with contextlib.suppress(asyncio.QueueEmpty):
                pending = request.events.get_nowait()
            finish = pending.finish_reason if pending and pending.kind == "finish" else None
            if finish == "abort" or request.aborted:
                return
            # vLLM sends the role chunk when the first output arrives (with the first
            # token, not when the request is accepted), then that token's chunk.
            if chat and not role_sent:
                await chunk(
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    },
                    extra={"prompt_token_ids": None, "prompt_text": None},
                    with_usage=continuous,
                )
                role_sent = True
            text = self.tokenizer.decode(event.token_ids)
            if chat:
                delta = {"reasoning": text} if event.reasoning else {"content": text}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                if finish:
                    choice["stop_reason"] = None
                choice["token_ids"] = None
            else:
                choice = {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                    "prompt_token_ids": None,
                    "token_ids": None,
                }
            done = finish is not None
            await chunk(
                choice,
                tokens=len(event.token_ids),
                with_usage=continuous,
                last=done and not include_usage,
            )
            sent += len(event.token_ids)
            self._count_tokens(len(event.token_ids))
            if done:
                break
            if faults.stall_seconds and not stalled and sent >= faults.stall_after_tokens:
                stalled = True
                await asyncio.sleep(faults.stall_seconds / self.state.time_scale)
        if include_usage:
            await chunk(None, with_usage=True, last=True)
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

    async def _whole(self, send, request: SimRequest, name: str, *, chat: bool) -> None:
        answer: list[int] = []
        reasoning: list[int] = []
        while True:
            event = await request.events.get()
            if event.kind == "finish":
                break
            (reasoning if event.reasoning else answer).extend(event.token_ids)
            self._count_tokens(len(event.token_ids))
        text = self.tokenizer.decode(answer)
        usage = {
            "prompt_tokens": request.prompt_len,
            "total_tokens": request.prompt_len + request.generated,
            "completion_tokens": request.generated,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        }
        # Every key vLLM's response models write, null where sparksim has nothing to say.
        if chat:
            message = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": self.tokenizer.decode(reasoning) if reasoning else None,
            }
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": request.finish_reason,
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
            tail = {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": request.finish_reason,
                "stop_reason": None,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "routed_experts": None,
            }
            tail = {}
            obj = "text_completion"
        await _json(
            send,
            200,
            {
                "id": request.request_id,
                "object": obj,
                "created": int(time.time()),
                "model": name,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": self.state.fingerprint,
                "usage": usage,
                **tail,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            },
        )

    # --- helpers -------------------------------------------------------------------------
    def _count_tokens(self, n: int) -> None:
        """The crash-after-tokens fault: die like a CUDA fault, without any clean-up."""
        if self.state.crash.add(n):
            log.error(
                "CUDA error: an illegal memory access was encountered "
                "(sparksim fault injection: crash-after-tokens)"
            )
            logging.shutdown()
            os._exit(1)

    def _engine(self) -> Engine:
        if not self.state.ready or self.state.engine is None:
            raise ApiError(503, "The model is still loading.", "ServiceUnavailableError")
        return self.state.engine

    def _check_model(self, body: dict) -> str:
        name = body.get("model")
        if name is None:
            return self.state.served_names[0]
        if name not in self.state.served_names:
            raise ApiError(
                404,
                f"The model `{name}` does not exist. "
                f"Valid aliases: {', '.join(self.state.served_names)}.",
                "NotFoundError",
                "model",
            )
        return name


ROUTES = {
    ("GET", "/health"): App.health,
    ("GET", "/v1/models"): App.models,
    ("GET", "/version"): App.version,
    ("GET", "/load"): App.load,
    ("GET", "/metrics"): App.metrics,
    ("GET", "/sparksim/stats"): App.stats,
    ("GET", "/sparksim/trace"): App.trace,
    ("POST", "/tokenize"): App.tokenize,
    ("POST", "/detokenize"): App.detokenize,
    ("POST", "/v1/chat/completions"): App.chat,
    ("POST", "/v1/completions"): App.completions,
}


def _messages(body: dict) -> list[dict]:
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


async def _body(receive) -> dict:
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


async def _watch_disconnect(receive, engine: Engine, request: SimRequest) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            engine.abort(request)
            request.events.put_nowait(Event("finish", finish_reason="abort"))
            return


async def _raw(send, status: int, body: bytes, content_type: str | None) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.insert(0, (b"content-type", content_type.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _json(send, status: int, obj) -> None:
    await _raw(send, status, json.dumps(obj, separators=COMPACT).encode(), "application/json")

"""The OpenAI-compatible HTTP API of the simulated vLLM server (a bare ASGI app).

Endpoints as vLLM V1 serves them: /health, /v1/models (ready only after start-up),
/version, /load, /metrics, /tokenize, /detokenize, /v1/chat/completions and
/v1/completions (streaming and not), plus /sparksim/stats (timing accuracy) and
/sparksim/trace (ground truth for load generators: when each token-bearing SSE chunk of a
streamed request was written). Errors use vLLM's JSON shape and status codes.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field

from sparksim import __version__
from sparksim import openai_responses_api as responses_api
from sparksim.engine import Engine, Event, SimRequest
from sparksim.faults import Faults, Http500Gate, TokenCrashCounter, mangle_metrics
from sparksim.metrics import CONTENT_TYPE, VllmMetrics
from sparksim.openai_requests import (
    ApiError,
    chat_messages,
    read_body,
    request_validation,
    sim_request,
    stream_options,
    vllm_validation,
)
from sparksim.openai_responses import CompletionStream, send_json, send_raw, whole_completion
from sparksim.tokenizer import DEFAULT_TOKENIZER, apply_chat_template
from sparksim.tool_choice import ToolParsing, check_tool_parser, requested_tool_choice
from sparksim.trace import TRACE_IDS_MAX, Trace, TraceStore
from vllm_adapter import contract as vllm_contract
from vllm_adapter import endpoints

log = logging.getLogger("sparksim.api")
# The vLLM version imitated unless the server is told another (`--vllm-version`).
VLLM_VERSION = vllm_contract.latest_version()
# Imported from here by tests and older callers; their homes are the modules above.
__all__ = ["VLLM_VERSION", "ApiError", "App", "ServerState", "Trace", "TraceStore"]


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
    # --enable-auto-tool-choice / --tool-call-parser: whether a tool choice can be answered.
    tools: ToolParsing = field(default_factory=ToolParsing)
    started: float = field(default_factory=time.time)
    gate: Http500Gate = field(init=False)
    crash: TokenCrashCounter = field(init=False)
    time_scale: float = 1.0
    traces: TraceStore = field(default_factory=TraceStore)
    vllm_version: str = VLLM_VERSION
    # vLLM's --api-key / VLLM_API_KEY: the keys its guarded paths demand (none: open).
    api_keys: tuple[str, ...] = ()
    # sparksim's --answers: "prose", or "markdown" (the demo mode: sparksim/corpus.py).
    answers: str = "prose"

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
        guarded = self.state.api_keys and method != "OPTIONS" and endpoints.is_guarded(path)
        if guarded and not self._authorized(scope):
            await send_json(send, 401, endpoints.UNAUTHORIZED_BODY)
            return
        try:
            handler = ROUTES.get((method, path))
            if handler is None:
                # Not vLLM's error shape but FastAPI's, as vLLM answers an unknown route.
                status = 405 if any(p == path for _, p in ROUTES) else 404
                detail = "Method Not Allowed" if status == 405 else "Not Found"
                await send_json(send, status, {"detail": detail})
                return
            await handler(self, scope, receive, send)
        except ApiError as exc:
            await send_json(send, exc.status, exc.body())

    def _authorized(self, scope) -> bool:
        """vLLM's check: SHA-256 of the bearer key against each key's, in constant time."""
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        key = endpoints.bearer(header.decode("latin-1"))
        if key is None:
            return False
        digest = hashlib.sha256(key.encode()).digest()
        match = False
        for known in self.state.api_keys:
            match |= hmac.compare_digest(digest, hashlib.sha256(known.encode()).digest())
        return match

    # --- plain endpoints --------------------------------------------------------------
    async def health(self, scope, receive, send) -> None:
        await send_raw(send, 200, b"", None)  # vLLM: an empty 200 without a content type

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
        await send_json(send, 200, {"object": "list", "data": data})

    async def version(self, scope, receive, send) -> None:
        # The one place the simulator admits what it is.
        await send_json(
            send,
            200,
            {"version": self.state.vllm_version, "simulated": True, "sparksim": __version__},
        )

    async def load(self, scope, receive, send) -> None:
        engine = self.state.engine
        await send_json(send, 200, {"server_load": engine.load if engine else 0})

    async def metrics(self, scope, receive, send) -> None:
        if self.state.metrics is None:
            raise ApiError(503, "The model is still loading.", "ServiceUnavailableError")
        body = self.state.metrics.render()
        if self.state.faults.metrics_mode:
            body = mangle_metrics(body.decode(), self.state.faults.metrics_mode).encode()
        await send_raw(send, 200, body, CONTENT_TYPE)

    async def stats(self, scope, receive, send) -> None:
        engine = self._engine()
        query = scope.get("query_string", b"").decode()
        summary = engine.timing.summary()
        if "reset=1" in query:
            engine.timing.reset()
        await send_json(
            send, 200, {"simulated": True, "time_scale": self.state.time_scale, **summary}
        )

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
            await send_json(send, 200, {"ids": store.recent(n)})
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
            await send_json(send, 200, {"traces": found, "missing": missing})
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
        await send_json(send, 200, trace.to_dict(request_id))

    async def tokenize(self, scope, receive, send) -> None:
        body = await read_body(receive)
        self._check_model(body)
        if "messages" in body:
            text = apply_chat_template(
                chat_messages(body),
                add_generation_prompt=bool(body.get("add_generation_prompt", True)),
            )
        elif isinstance(body.get("prompt"), str):
            text = body["prompt"]
        else:
            raise request_validation(
                ("body.prompt", "missing", "Field required", body),
                ("body.messages", "missing", "Field required", body),
            )
        tokens = self.tokenizer.encode(text)
        await send_json(
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
        body = await read_body(receive)
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
        await send_json(send, 200, {"prompt": self.tokenizer.decode(known)})

    # --- completions -------------------------------------------------------------------
    async def chat(self, scope, receive, send) -> None:
        body = await read_body(receive)
        tool_choice = requested_tool_choice(body)  # vLLM: a validator of the request model
        name = self._check_model(body)
        check_tool_parser(tool_choice, self.state.tools)  # vLLM: before the chat template
        text = apply_chat_template(chat_messages(body), add_generation_prompt=True)
        ids = self.tokenizer.encode(text)[: self.state.max_model_len + 1]  # as vLLM truncates
        await self._complete(body, name, ids, send, receive, chat=True)

    async def completions(self, scope, receive, send) -> None:
        body = await read_body(receive)
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

    async def responses(self, scope, receive, send) -> None:
        """vLLM's Responses API (sparksim/openai_responses_api.py): the input as chat
        messages through the chat template, answered as a response object or its events."""
        body = await read_body(receive)
        name = self._check_model(body)
        messages = responses_api.messages(body)
        chat = responses_api.chat_body(body, self.state.max_model_len)
        text = apply_chat_template(messages, add_generation_prompt=True)
        ids = self.tokenizer.encode(text)[: self.state.max_model_len + 1]
        engine = self._engine()
        request = sim_request(chat, ids, chat=True, max_model_len=self.state.max_model_len,
                              reasoning=False, tokenizer=self.tokenizer,
                              answers=self.state.answers,
                              model=self.state.served_names[0])  # fmt: skip
        engine.submit(request)
        watcher = asyncio.create_task(_watch_disconnect(receive, engine, request))
        try:
            await responses_api.answer(self, send, request, body, name)
        finally:
            watcher.cancel()
            engine.abort(request)  # no-op when it finished

    async def _complete(self, body, name, prompt_ids, send, receive, *, chat: bool) -> None:
        engine = self._engine()
        if self.state.gate.should_fail():
            raise ApiError(
                500,
                "Internal server error (sparksim fault injection: http500)",
                "InternalServerError",
            )
        request = sim_request(
            body,
            prompt_ids,
            chat=chat,
            max_model_len=self.state.max_model_len,
            reasoning=self.state.reasoning,
            tokenizer=self.tokenizer,
            answers=self.state.answers,
            model=self.state.served_names[0],
        )
        stream = bool(body.get("stream", False))
        options = stream_options(body)
        engine.submit(request)
        watcher = asyncio.create_task(_watch_disconnect(receive, engine, request))
        try:
            if stream:
                await CompletionStream(self, send, request, name, chat=chat, options=options).run()
            else:
                await whole_completion(self, send, request, name, chat=chat)
        finally:
            watcher.cancel()
            engine.abort(request)  # no-op when it finished

    # --- helpers -------------------------------------------------------------------------
    def count_tokens(self, n: int) -> None:
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
    ("POST", "/v1/responses"): App.responses,
}


async def _watch_disconnect(receive, engine: Engine, request: SimRequest) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            engine.abort(request)
            request.events.put_nowait(Event("finish", finish_reason="abort"))
            return

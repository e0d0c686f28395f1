"""The panel's OpenAI-compatible endpoint: a bare ASGI app in front of Django (docs/gateway.md).

``GET /v1/models``, ``GET /v1/models/<name>``, ``POST /v1/chat/completions``,
``POST /v1/completions``, ``POST /v1/responses``, ``POST /v1/embeddings``,
``POST /v1/score``, ``POST /v1/rerank``, ``POST /tokenize``, ``POST /detokenize``.
Each request: the key and the limits in one Redis round trip (apps/gateway/store.py), the
route from the in-memory table (apps/gateway/routing.py), the body rewritten once
(vllm_adapter/relay.py), the upstream over a kept-alive connection (vllm_adapter/http1.py),
streamed chunks forwarded as they arrive, and a second round trip at the end that frees
the slot, settles the tokens and queues the usage row. No Django request, middleware or
ORM query on the way, except to re-read a key or the routes after they changed.

Errors are OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``: 400 bad
body, 401 bad key, 403 not allowed, 404 unknown model (listing the ready ones), 408/413
body too slow/large, 429 over a limit (with ``Retry-After``), 502 the model server
failed, 503 the model is known but not running (which recipe serves it, whether a start
is under way) or Redis is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid

from asgiref.sync import sync_to_async
from django.conf import settings

from apps.core.redisconn import RedisError
from apps.gateway import catalog, cors, keys, refusals, routing
from apps.gateway.store import AsyncStore
from vllm_adapter import endpoints, prompt_count, relay, sse
from vllm_adapter.http1 import Pool, UpstreamError

log = logging.getLogger(__name__)

# path -> (endpoint label, takes a model, streams)
POST_ROUTES = {
    endpoints.CHAT_COMPLETIONS: ("chat", True),
    endpoints.COMPLETIONS: ("completions", True),
    endpoints.RESPONSES: ("responses", True),  # vLLM's Responses API (OpenAI's newer one)
    "/v1/embeddings": ("embeddings", False),
    # Pooling models (a recipe with --runner pooling): vLLM's own score and rerank APIs.
    "/v1/score": ("score", False),
    "/v1/rerank": ("rerank", False),
    endpoints.TOKENIZE: ("tokenize", False),
    endpoints.DETOKENIZE: ("detokenize", False),
}
PATHS = ("/v1", endpoints.TOKENIZE, endpoints.DETOKENIZE)
_JSON = [(b"content-type", b"application/json")]
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


# Usage rows and /metrics name a model nobody serves by this one label: a client sending
# random names must not grow the panel's series or its table's distinct models.
UNKNOWN_MODEL = "(unknown model)"


def handles(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/") or path in PATHS[1:]


class Refused(Exception):
    def __init__(self, status: int, message: str, type_: str, code: str, headers=(),
                 counted: bool = False):  # fmt: skip
        super().__init__(message)
        self.status, self.type, self.code, self.headers = status, type_, code, list(headers)
        self.counted = counted  # the admission script counted it already (store.py)


def error_body(message: str, type_: str, code: str | int | None, param=None) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    ).encode()


async def _send_error(send, exc: Refused) -> None:
    body = error_body(str(exc), exc.type, exc.code)
    headers = [*_JSON, (b"content-length", str(len(body)).encode()), *exc.headers]
    if 400 <= exc.status < 500 and exc.status != 429:
        # The client's own fault, and every refusal before the key is admitted (401, 400,
        # 404, 405, 408, 413): the connection ends with the answer and the rest of a body is
        # never read (sparkpanel/httpserver.py). 429 and 5xx keep an admitted client's
        # connection for its retry.
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


WAIT_HEADER = b"x-sparkpanel-wait"
HOLD_POLL_S = 5.0  # how often a held request looks again (and a stream hears of it)
# Meanwhile it watches the route table's version (one Redis GET): a run that becomes ready
# bumps it, and the request goes on at once rather than at the next look (bench/ondemand_load).
HOLD_ROUTES_POLL_S = 0.25


def _wait_seconds(scope) -> float:
    """How long the client will wait for an on-demand model to load (X-SparkPanel-Wait:
    seconds, at most GATEWAY_ONDEMAND_WAIT_MAX_S); 0 when it did not ask."""
    raw = _header(scope, WAIT_HEADER)
    if not raw:
        return 0.0
    try:
        seconds = float(raw.strip())
    except ValueError:
        return 0.0
    if not seconds > 0:  # also NaN
        return 0.0
    return min(seconds, float(settings.GATEWAY_ONDEMAND_WAIT_MAX_S))


def _with_headers(send, extra: list[tuple[bytes, bytes]]):
    """`send` that adds `extra` headers to the response's start."""

    async def adding(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return adding


def _header(scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


class _Admission:
    __slots__ = ("allowed", "cap", "day", "key_id", "key_reserved", "reserved", "user")

    def __init__(self, answer: list):
        self.user, self.key_id = answer[1], answer[2]
        cap = int(answer[3])
        self.cap = None if cap < 0 else cap
        self.reserved, self.day = int(answer[4]), int(answer[5])
        # Tokens reserved from the key's own budget (0: it has none).
        self.key_reserved = int(answer[8]) if len(answer) > 8 else 0
        # An uncounted admission (GET /v1/models) carries the key's model allowlist.
        self.allowed: list[str] | None = (
            json.loads(answer[7]) if len(answer) > 7 and answer[7] else None
        )


class Gateway:
    def __init__(self) -> None:
        self.pool = Pool(connect_timeout=settings.GATEWAY_CONNECT_TIMEOUT_S)
        self.store = AsyncStore()
        self.table = routing.RouteTable(version="")
        self.inflight: dict[int, int] = {}
        self.down: dict[int, float] = {}  # run id -> until (monotonic): no new requests
        self._reload = asyncio.Lock()
        self._filling: dict[str, asyncio.Future] = {}  # key digest -> its record being read
        self._loop: asyncio.AbstractEventLoop | None = None
        # What this process holds of answers not yet passed on (vllm_adapter/relay.py).
        self.budget = relay.Budget(settings.GATEWAY_BUFFER_MAX_BYTES)
        self._held: dict[str, int] = {}  # model -> requests held for its load (this process)

    def _bind(self) -> None:
        """Connections and locks belong to one event loop: a new loop (a server restarted in
        the same process, as tests do) starts with fresh ones."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self.pool = Pool(connect_timeout=settings.GATEWAY_CONNECT_TIMEOUT_S)
            self._reload = asyncio.Lock()
            self._filling = {}
            self.table = routing.RouteTable(version="")
            self.inflight.clear()
            self.down.clear()
            self.budget = relay.Budget(settings.GATEWAY_BUFFER_MAX_BYTES)
            self._held = {}

    # --- entry ----------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        self._bind()
        state = {"started": False}
        origin = _header(scope, b"origin")
        if origin is not None:
            # A browser page: answer its preflight, and name its origin on every answer
            # when admins allowed it (apps/gateway/cors.py). The list rides on the route
            # table, brought up to date first.
            with contextlib.suppress(RedisError):  # the request itself says so below
                await self._ensure_table(await self.store.routes_version())
            allowed = origin in self.table.origins
            if scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method"):
                return await self._preflight(scope, send, origin, allowed)
            if allowed:
                send = _with_headers(send, cors.answer_headers(origin))

        async def tracked(message):
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self._route(scope, receive, tracked)
        except Refused as exc:
            if exc.status in (401, 403, 429) and not exc.counted:
                # No key, or one that is not a key: counted here (the admission script
                # counts the refusals it makes itself).
                with contextlib.suppress(RedisError):
                    await self.store.count_refusal("-", exc.code)
            if not state["started"]:
                await _send_error(send, exc)
        except RedisError as exc:
            log.error("gateway: Redis is unreachable: %s", exc)
            if not state["started"]:
                await _send_error(send, Refused(
                    503, "The panel cannot reach its Redis; try again shortly.",
                    "service_unavailable", "redis_unavailable",
                ))  # fmt: skip
        except Exception:
            log.exception("gateway: %s %s failed", scope.get("method"), scope.get("path"))
            if not state["started"]:
                await _send_error(send, Refused(
                    500, "The gateway failed this request (see the panel's log).",
                    "server_error", "internal_error",
                ))  # fmt: skip

    async def _preflight(self, scope, send, origin: str, allowed: bool) -> None:
        """A CORS preflight: 204 with the origin named for an allowed origin (no key is
        checked: a preflight carries none), else 403 in OpenAI's shape (no CORS header,
        so the browser stops there)."""
        if not allowed:
            with contextlib.suppress(RedisError):
                await self.store.count_refusal("-", "origin_not_allowed")
            await _send_error(send, Refused(
                403, f"The origin {origin[:200]} may not call this panel's /v1 from a browser; "
                "an admin can allow it (admin › Gateway › Allowed origins).",
                "permission_error", "origin_not_allowed",
            ))  # fmt: skip
            return
        headers = cors.preflight_headers(origin, _header(scope, b"access-control-request-headers"))
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    async def _route(self, scope, receive, send) -> None:
        method, path = scope["method"], scope["path"]
        if path == endpoints.MODELS and method == "GET":
            return await self._models(scope, send, None)
        if path.startswith(endpoints.MODELS + "/") and method == "GET":
            return await self._models(scope, send, path[len(endpoints.MODELS) + 1 :])
        route = POST_ROUTES.get(path)
        if route is None:
            known = path == endpoints.MODELS or path in POST_ROUTES
            if known:
                raise Refused(405, f"{method} is not allowed on {path}.",
                              "invalid_request_error", "method_not_allowed")  # fmt: skip
            raise Refused(404, f"The panel's gateway has no {path}.", "invalid_request_error",
                          "not_found")  # fmt: skip
        if method != "POST":
            raise Refused(405, f"{method} is not allowed on {path}.", "invalid_request_error",
                          "method_not_allowed")  # fmt: skip
        await self._relay(scope, receive, send, path, route)

    # --- the key --------------------------------------------------------------------------
    def _digest(self, scope) -> str:
        clear = endpoints.bearer(_header(scope, b"authorization"))
        if not clear:
            message = "Give your key as 'Authorization: Bearer spg_…' (profile → Gateway keys)."
            raise Refused(401, message, "authentication_error", "missing_api_key")
        if not keys.looks_like_key(clear):
            raise Refused(401, "The key is invalid or has been revoked.",
                          "authentication_error", "invalid_api_key")  # fmt: skip
        return keys.digest(clear)

    async def _admit(self, digest, request_id, model, prompt_bound, asked, count=True):
        for _ in range(3):
            answer = await self.store.admit(digest, request_id, model, prompt_bound, asked,
                                            count=count)  # fmt: skip
            verdict = answer[0]
            if verdict == "ok":
                await self._ensure_table(answer[6])
                return _Admission(answer)
            if verdict in ("miss", "stale"):
                await self._fill(digest)
                continue
            raise _refusal(verdict, answer, model)
        raise Refused(503, "The key's record kept changing; try again.", "service_unavailable",
                      "retry")  # fmt: skip

    async def _fill(self, digest: str) -> None:
        """Read a key's record from the database into Redis, once for all the requests that
        found it missing or stale meanwhile: a burst arriving just after the record expired
        would otherwise queue one database read per request on Django's one sync thread."""
        pending = self._filling.get(digest)
        if pending is None:
            pending = self._filling[digest] = asyncio.ensure_future(self._read_record(digest))
            pending.add_done_callback(lambda done: self._filled(digest, done))
        await asyncio.shield(pending)  # a client that leaves does not cancel the others' read

    async def _read_record(self, digest: str) -> None:
        record, revoked = await sync_to_async(keys.record_for)(digest)
        await self.store.fill(digest, record, revoked=revoked)

    def _filled(self, digest: str, done: asyncio.Future) -> None:
        self._filling.pop(digest, None)
        if not done.cancelled():
            done.exception()  # seen (its waiters raise it), even if every waiter left

    async def _check_key(self, digest: str) -> None:
        """The key alone (valid, not revoked or expired, a role that may chat), no slot
        taken: raises the same refusal admission would."""
        await self._admit(digest, uuid.uuid4().hex, "", 0, -1, count=False)

    # --- routes ---------------------------------------------------------------------------
    async def _ensure_table(self, version: str) -> None:
        if version == self.table.version:
            return
        async with self._reload:
            if version != self.table.version:
                self.table = await sync_to_async(routing.build)(version)
                live = {r.run_id for replicas in self.table.ready.values() for r in replicas}
                self.down = {k: v for k, v in self.down.items() if k in live}

    async def _hold(self, receive, send, model, admission, outcome, *, stream) -> bool:
        """Hold a request that asked to wait (X-SparkPanel-Wait) while its on-demand model
        loads: a streamed one gets its 200 at once and an SSE comment with the load's
        progress every few seconds; a whole one waits silently. True when a replica is
        ready (the caller sends the request on); False when the client left or, on a
        stream, the load failed (said in an error event). A load that cannot happen, or
        outlasts the wait, is a 503 for a request that has no stream yet."""
        held = self._held.setdefault(model, 0)
        if held >= settings.GATEWAY_ONDEMAND_HELD_MAX:
            raise Refused(429, f"{held} requests already wait for '{model}' to load; try again "
                          "shortly.", "rate_limit_exceeded", "load_queue_full",
                          headers=[(b"retry-after", b"10")])  # fmt: skip
        self._held[model] = held + 1
        gone = asyncio.Event()

        async def watch():
            while True:
                if (await receive())["type"] == "http.disconnect":
                    gone.set()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            recipe_id = self.table.on_demand[model]
            state = None
            while True:
                with contextlib.suppress(RedisError):
                    await self._ensure_table(await self.store.routes_version())
                if self.table.ready.get(model):
                    return True
                load = sync_to_async(catalog.request_load_for)
                state = await load(recipe_id, int(admission.user), wait=True)
                now = time.monotonic()
                failed = state.state == "cannot_load" or now >= outcome.hold_until
                if failed:
                    message = (
                        state.message + "." if state.state == "cannot_load"
                        else f"'{model}' did not load within the wait: {state.message}."
                    )  # fmt: skip
                    if not outcome.sse_started:
                        raise Refused(503, message, "service_unavailable", "model_cannot_load"
                                      if state.state in ("cannot_load", "queued")
                                      else "model_loading",
                                      headers=[(b"retry-after",
                                                str(state.retry_after_s).encode())])  # fmt: skip
                    outcome.status, outcome.error = 503, message[:300]
                    event = b"data: " + error_body(message, "service_unavailable", 503) + b"\n\n"
                    await send({"type": "http.response.body", "body": event + sse.DONE_EVENT,
                                "more_body": False})  # fmt: skip
                    return False
                if stream:
                    if not outcome.sse_started:
                        outcome.sse_started = True
                        await send({"type": "http.response.start", "status": 200,
                                    "headers": _SSE_HEADERS})  # fmt: skip
                    comment = f": {state.message}\n\n".encode("utf-8", "replace")
                    await send({"type": "http.response.body", "body": comment, "more_body": True})
                await self._until_routes_change(gone, HOLD_POLL_S)
                if gone.is_set():
                    outcome.cancelled, outcome.status = True, 499
                    return False
        finally:
            watcher.cancel()
            self._held[model] -= 1

    async def _until_routes_change(self, gone: asyncio.Event, seconds: float) -> None:
        """Wait up to `seconds`, until the client leaves or the route table changes (a run
        ready, stopped or failed bumps its version)."""
        version = self.table.version
        deadline = time.monotonic() + seconds
        while not gone.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(HOLD_ROUTES_POLL_S, left)):
                    await gone.wait()
            with contextlib.suppress(RedisError):
                if await self.store.routes_version() != version:
                    return

    async def _load_on_demand(self, model: str, admission: _Admission) -> Refused:
        """An on-demand model no run serves: start it (or join the start under way) and
        answer 503 with where it stands and when to come back (apps/gateway/catalog.py)."""
        recipe_id = self.table.on_demand[model]
        state = await sync_to_async(catalog.request_load_for)(recipe_id, int(admission.user))
        retry = [(b"retry-after", str(state.retry_after_s).encode())]
        if state.state == "cannot_load":
            return Refused(503, state.message + ".", "service_unavailable", "model_cannot_load",
                           headers=retry)  # fmt: skip
        if state.state == "ready":  # ready a moment ago: the table catches up at once
            message = f"{state.message}; send the request again."
            return Refused(503, message, "service_unavailable", "model_loading",
                           headers=[(b"retry-after", b"1")])  # fmt: skip
        return Refused(503, f"{state.message[0].upper()}{state.message[1:]}. "
                       f"Try again in {state.retry_after_s} s.", "service_unavailable",
                       "model_loading", headers=retry)  # fmt: skip

    def _unroutable(self, model: str, allowed: list[str] | None = None) -> Refused:
        known = self.table.known.get(model)
        if known is not None and model not in self.table.ready:
            recipes = ", ".join(sorted(set(known.recipes))) or "?"
            if known.starting:
                extra = f" A start is under way: {'; '.join(known.starting)}."
            else:
                extra = " No start is under way: an operator can start it from the recipe's page."
            return Refused(503, f"The model '{model}' is not running (recipe: {recipes}).{extra}",
                           "service_unavailable", "model_not_running",
                           headers=[(b"retry-after", b"30")] if known.starting else [])  # fmt: skip
        if model in self.table.ready:
            return Refused(503, f"No replica of '{model}' is answering right now.",
                           "service_unavailable", "no_replica")  # fmt: skip
        names = self.table.names()
        listed = ", ".join(names) if names else "none"
        return Refused(404, f"The model '{model}' does not exist. Ready now: {listed}.",
                       "invalid_request_error", "model_not_found")  # fmt: skip

    # --- GET /v1/models -------------------------------------------------------------------
    async def _models(self, scope, send, one: str | None) -> None:
        digest = self._digest(scope)
        allowed = (await self._admit(digest, uuid.uuid4().hex, "", 0, -1, count=False)).allowed
        names = [n for n in self.table.names() if not allowed or n in allowed]
        data = [{"id": n, "object": "model", "created": self.table.created.get(n, 0),
                 "owned_by": "sparkpanel", "sparkpanel": {"state": "ready"}}
                for n in names]  # fmt: skip
        # On-demand models that no run serves yet: listed with where they stand, in an
        # extension field OpenAI clients ignore (asking loads nothing: only a request does).
        waiting = {n: rid for n, rid in self.table.on_demand.items()
                   if n not in self.table.ready and (not allowed or n in allowed)}  # fmt: skip
        if waiting:
            states = await sync_to_async(catalog.states)(waiting)
            data += [{"id": n, "object": "model", "created": 0, "owned_by": "sparkpanel",
                      "sparkpanel": {**states[n].as_dict(), "on_demand": True}}
                     for n in sorted(states)]  # fmt: skip
        if one is not None:
            match = [d for d in data if d["id"] == one]
            if not match:
                raise self._unroutable(one)
            body = json.dumps(match[0]).encode()
        else:
            body = json.dumps({"object": "list", "data": data}).encode()
        await _send_json(send, 200, body)

    # --- POST: relay ----------------------------------------------------------------------
    async def _relay(self, scope, receive, send, path, route) -> None:
        label, streams = route
        started = time.monotonic()
        digest = self._digest(scope)
        body = await _read_body(receive, scope, lambda: self._check_key(digest))
        try:
            payload = json.loads(body)
        except ValueError:
            raise Refused(400, "The body is not JSON.", "invalid_request_error",
                          "invalid_json") from None  # fmt: skip
        if not isinstance(payload, dict):
            raise Refused(400, "The body must be a JSON object.", "invalid_request_error",
                          "invalid_json")  # fmt: skip
        model = payload.get("model")
        if not isinstance(model, str) or not model or len(model) > 200:
            raise Refused(400, "Say which model: 'model' is missing (GET /v1/models lists "
                          "them).", "invalid_request_error", "model_missing")  # fmt: skip
        stream = streams and payload.get("stream") is True
        if label == "responses":
            asked = payload.get("max_output_tokens")
        else:
            asked = payload.get("max_completion_tokens", payload.get("max_tokens"))
        asked = asked if isinstance(asked, int) and not isinstance(asked, bool) else -1
        if asked < 0:
            # Unset: vLLM may generate up to the context length; a token budget reserves that.
            asked = self.table.max_len(model) or -1
        request_id = uuid.uuid4().hex
        capped = label in ("chat", "completions", "responses")
        # Every endpoint counts against tokens per day (the prompt bound: the body's bytes).
        admission = await self._admit(digest, request_id, model, len(body), asked if capped else 0)
        row = {"id": request_id, "at": time.time(), "u": int(admission.user),
               "k": int(admission.key_id), "m": model, "ep": label}  # fmt: skip
        outcome = _Outcome()
        outcome.payload, outcome.path = payload, path
        settled = False

        async def settle() -> None:
            """Once: free the request's slot, settle its tokens, queue its usage row. Called
            before the client sees the end of the answer, so that its next request finds the
            slot free whichever panel process it reaches, and no new request waits behind
            this bookkeeping."""
            nonlocal settled
            if settled:
                return
            settled = True
            if outcome.replica is not None and outcome.usage_missing():
                outcome.prompt = await self._prompt_tokens(outcome)
            if outcome.status == 404 and outcome.run is None:
                row["m"] = UNKNOWN_MODEL  # never a name a client made up
            row.update(outcome.row(started))
            used = outcome.prompt + outcome.completion
            # A refused request keeps its rate slot (a 404 that gave it back let a client
            # send unknown names without limit); its reserved tokens come back all the same.
            with contextlib.suppress(RedisError):
                await self.store.release(admission.user, request_id, admission.day,
                                         admission.reserved, used, row, False,
                                         run=outcome.run, key=admission.key_id,
                                         key_reserved=admission.key_reserved)  # fmt: skip

        outcome.settle = settle
        try:
            await self._forward(scope, receive, send, payload, admission, row, outcome,
                                stream=stream, rewrite=capped)  # fmt: skip
        except Refused as exc:
            outcome.status, outcome.error = exc.status, str(exc)[:300]
            raise
        finally:
            await settle()

    async def _forward(self, scope, receive, send, payload, admission, row, outcome, *,
                       stream, rewrite) -> None:  # fmt: skip
        model = row["m"]
        tried: set[int] = set()
        while True:
            replica = self.table.pick(model, self.inflight, self.down, tried)
            if replica is None and model in self.table.on_demand and not tried:
                wait = _wait_seconds(scope)
                if not wait:
                    raise await self._load_on_demand(model, admission)
                if outcome.hold_until is None:
                    outcome.hold_until = time.monotonic() + wait
                if not await self._hold(receive, send, model, admission, outcome, stream=stream):
                    return  # the client left, or the load failed (said on the stream)
                continue
            if replica is None:
                raise self._unroutable(model)
            if rewrite:
                upstream_body, wants_usage = relay.request_body(
                    dict(payload), served_name=replica.served_name, stream=stream,
                    max_tokens_cap=_cap(admission.cap, replica),
                    responses=scope["path"] == endpoints.RESPONSES,
                )  # fmt: skip
            else:
                payload["model"] = replica.served_name
                upstream_body, wants_usage = json.dumps(payload).encode(), False
            headers = [(b"content-type", b"application/json")]
            if replica.auth:
                headers.append((b"authorization", replica.auth))
            if stream:
                headers.append((b"accept", b"text/event-stream"))
            self.inflight[replica.run_id] = self.inflight.get(replica.run_id, 0) + 1
            outcome.replica = replica  # sent: its prompt may be processed from here on
            try:
                try:
                    response = await self.pool.request(
                        replica.address, replica.port, "POST", scope["path"], headers,
                        upstream_body, head_timeout=settings.GATEWAY_HEAD_TIMEOUT_S,
                        read_timeout=settings.GATEWAY_STALL_TIMEOUT_S,
                    )  # fmt: skip
                except UpstreamError as exc:
                    self._mark_down(replica, exc)
                    if exc.kind == "connect":
                        outcome.replica = None
                        tried.add(replica.run_id)
                        continue  # nothing reached that server: the next replica takes it
                    raise Refused(502, f"The model server on {replica.host} failed: {exc}",
                                  "upstream_error", "upstream_failed") from None  # fmt: skip
                outcome.run, row["run"], row["h"] = replica.run_id, replica.run_id, replica.host
                outcome.server_status = response.status
                rename = None
                if replica.served_name != model:
                    served = json.dumps(replica.served_name)
                    rename = (
                        b'"model":' + served.encode(),
                        b'"model":' + json.dumps(model).encode(),
                    )
                if stream and response.status == 200:
                    await self._stream(receive, send, response, outcome, rename, replica,
                                       drop_usage=not wants_usage)  # fmt: skip
                else:
                    await self._whole(receive, send, response, outcome, rename, replica)
                return
            finally:
                self.inflight[replica.run_id] -= 1

    def _mark_down(self, replica: routing.Replica, exc: UpstreamError) -> None:
        if exc.kind in ("connect", "closed"):
            self.down[replica.run_id] = time.monotonic() + settings.GATEWAY_REPLICA_DOWN_S
            log.warning("gateway: run %s on %s taken out for %s s: %s", replica.run_id,
                        replica.host, settings.GATEWAY_REPLICA_DOWN_S, exc)  # fmt: skip

    async def _stream(self, receive, send, response, outcome, rename, replica, *, drop_usage):
        tap = relay.StreamTap(
            drop_usage=drop_usage, rename=rename, budget=self.budget,
            max_event_bytes=settings.GATEWAY_EVENT_MAX_BYTES,
            max_events=_max_events(replica, outcome.payload),
            max_bytes=settings.GATEWAY_STREAM_MAX_BYTES,
        )  # fmt: skip
        watcher = _DisconnectWatcher(receive, response)
        outcome.status = 200
        if not outcome.sse_started:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        try:
            async for data in response.chunks():
                out = tap.feed(data)
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            rest = tap.close()
            if rest:
                await send({"type": "http.response.body", "body": rest, "more_body": True})
        except relay.TapError as exc:
            response.abort()  # vLLM aborts the request: no more work for an answer cut here
            outcome.status = 503 if exc.kind == "busy" else 502
            outcome.error = self._refused_answer(replica, exc)
            code = "panel_busy" if exc.kind == "busy" else "upstream_misbehaved"
            event = b"data: " + error_body(outcome.error, "upstream_error", code) + b"\n\n"
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": event + sse.DONE_EVENT,
                            "more_body": True})  # fmt: skip
        except UpstreamError as exc:
            if watcher.gone:
                # The client left (the SDK closed its stream): cancelled, 499 as every
                # request the client ended, though a 200 head went out (docs/gateway.md).
                outcome.cancelled, outcome.status = True, 499
            else:
                self._mark_down(replica, exc)
                outcome.status = 502
                outcome.error = f"the model server on {replica.host} failed mid-answer: {exc}"
                event = b"data: " + error_body(outcome.error, "upstream_error", 502) + b"\n\n"
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": event, "more_body": True})
        finally:
            tap.close()  # gives back what the unfinished event held of the budget
            watcher.stop()
            outcome.take_usage(tap.usage)
            if tap.usage is None:  # cut short: no usage chunk; one token per event (vLLM)
                outcome.completion = tap.token_events
            outcome.first_token_at = tap.first_token_at
            if tap.error and outcome.status == 200:
                outcome.status = 500
                outcome.error = str(tap.error.get("message", ""))[:300]
            if not watcher.gone:
                await outcome.settle()
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _refused_answer(self, replica: routing.Replica, exc: Exception) -> str:
        """What the client and the panel's log read when an answer is cut by a bound."""
        kind = getattr(exc, "kind", "")
        if kind == "busy":
            message = (f"The panel holds too many large answers right now "
                       f"({settings.GATEWAY_BUFFER_MAX_BYTES // 1_000_000} MB, "
                       "GATEWAY_BUFFER_MAX_MB); try again shortly.")  # fmt: skip
        else:
            message = f"The model server on {replica.host} misbehaved: {exc}; the answer was cut."
        log.warning("gateway: run %s on %s: %s", replica.run_id, replica.host, message)
        return message[:300]

    async def _whole(self, receive, send, response, outcome, rename, replica) -> None:
        watcher = _DisconnectWatcher(receive, response)
        held = 0
        try:
            try:
                body = await response.read(settings.GATEWAY_RESPONSE_MAX_BYTES, self.budget)
                held = len(body)
            except UpstreamError as exc:
                if watcher.gone:
                    outcome.cancelled, outcome.status = True, 499
                    return
                if exc.kind == "busy":
                    retry = [(b"retry-after", b"5")]
                    raise Refused(503, self._refused_answer(replica, exc), "service_unavailable",
                                  "panel_busy", headers=retry) from None  # fmt: skip
                if exc.kind == "too_large":
                    raise Refused(502, self._refused_answer(replica, exc), "upstream_error",
                                  "upstream_misbehaved") from None  # fmt: skip
                self._mark_down(replica, exc)
                raise Refused(502, f"The model server on {replica.host} failed: {exc}",
                              "upstream_error", "upstream_failed") from None  # fmt: skip
            finally:
                watcher.stop()
            outcome.status = response.status
            if response.status == 200:
                outcome.take_answer(body)
                if rename is not None:
                    body = body.replace(*rename, 1)
            else:
                outcome.error = endpoints.error_message(body)[:300]
            if outcome.sse_started:  # held with keep-alives: the answer goes as an event
                await outcome.settle()
                event = b"data: " + body.strip() + b"\n\n" + sse.DONE_EVENT
                await send({"type": "http.response.body", "body": event, "more_body": False})
                return
            content_type = response.header(b"content-type") or b"application/json"
            headers = [(b"content-type", content_type),
                       (b"content-length", str(len(body)).encode())]  # fmt: skip
            await outcome.settle()
            await send({"type": "http.response.start", "status": response.status,
                        "headers": headers})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
        finally:
            self.budget.give(held)

    async def _prompt_tokens(self, outcome: _Outcome) -> int:
        """The prompt tokens of a request whose answer never said (cut short, failed): vLLM
        counts them again (/tokenize, the same messages through the same template), else
        they are estimated from the prompt's text (vllm_adapter/prompt_count.py)."""
        replica = outcome.replica
        headers = [(b"content-type", b"application/json")]
        if replica.auth:
            headers.append((b"authorization", replica.auth))
        timeout = settings.GATEWAY_TOKENIZE_TIMEOUT_S

        async def tokenize(body: bytes) -> bytes | None:
            try:
                response = await self.pool.request(
                    replica.address, replica.port, "POST", endpoints.TOKENIZE, headers, body,
                    head_timeout=timeout, read_timeout=timeout,
                )  # fmt: skip
                answer = await response.read(settings.GATEWAY_RESPONSE_MAX_BYTES, self.budget)
            except UpstreamError:
                return None
            self.budget.give(len(answer))  # read at once by the caller, before any await
            return answer if response.status == 200 else None

        count, counted = await prompt_count.prompt_tokens(
            outcome.path, outcome.payload, replica.served_name, tokenize, timeout_s=timeout
        )
        if not counted:
            log.info("gateway: run %s: prompt tokens estimated (/tokenize gave no count)",
                     replica.run_id)  # fmt: skip
        return count


def _max_events(replica: routing.Replica, payload: dict) -> int | None:
    """The most events an answer can have: vLLM sends one per engine step that made output,
    each with at least one new token, for each choice, plus a few without (role, finish,
    usage, [DONE]). None when the run's context length is not known."""
    if not replica.max_model_len:
        return None
    if "input" in payload and "messages" not in payload and "prompt" not in payload:
        # The Responses API: one text delta a step, plus its items' opening and closing
        # events (a dozen for text; reasoning and tool items add theirs).
        return replica.max_model_len + 64
    n = payload.get("n")
    n = n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 1024 else 1
    prompt = payload.get("prompt")
    prompts = (
        len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
    )
    return (replica.max_model_len + 8) * n * min(prompts, 1024) + 8


def _cap(cap: int | None, replica: routing.Replica) -> int | None:
    """A budget's cap on max_tokens, unless the context length caps harder already."""
    if cap is None or (replica.max_model_len and cap >= replica.max_model_len):
        return None
    return cap


class _Outcome:
    __slots__ = ("cancelled", "completion", "error", "first_token_at", "hold_until", "path",
                 "payload", "prompt", "replica", "run", "server_status", "settle",
                 "sse_started", "status", "usage_seen")  # fmt: skip

    def __init__(self):
        self.settle = None  # the request's settle() (Gateway._relay), once, before its end
        self.status = 0
        self.prompt = self.completion = 0
        self.first_token_at: float | None = None
        self.cancelled = False
        self.error = ""
        self.run: int | None = None
        self.path = ""
        self.payload: dict = {}
        self.replica: routing.Replica | None = None  # the server the request was sent to
        self.server_status = 0  # what that server answered (0: no answer's head came)
        self.usage_seen = False
        self.hold_until: float | None = None  # held for an on-demand load until (monotonic)
        self.sse_started = False  # a held stream's 200 and keep-alives went out already

    def take_usage(self, usage: dict | None) -> None:
        if usage:
            self.usage_seen = True
            # Chat and completions say prompt/completion, the Responses API input/output.
            self.prompt = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
            self.completion = _count(usage.get("completion_tokens", usage.get("output_tokens")))

    def take_answer(self, body: bytes) -> None:
        """A whole 200 answer's tokens: its usage, or what /tokenize and /detokenize did."""
        if self.path == endpoints.TOKENIZE:
            count = prompt_count.tokenized_count(body)
            if count is not None:
                self.usage_seen, self.prompt = True, count
        elif self.path == endpoints.DETOKENIZE:
            tokens = self.payload.get("tokens")
            self.usage_seen, self.prompt = True, len(tokens) if isinstance(tokens, list) else 0
        else:
            self.take_usage(relay.whole_usage(body))

    def usage_missing(self) -> bool:
        """Sent to a server that did not refuse it (no 4xx answer), yet no usage came back:
        a stream cut short by the client, a stall or a failure. Its prompt was processed."""
        return not self.usage_seen and not 400 <= self.server_status < 500

    def row(self, started: float) -> dict:
        now = time.monotonic()
        ttft = (self.first_token_at - started) * 1000 if self.first_token_at else None
        # No status yet: the gateway itself failed (it answered 500). 499 is kept for the
        # requests a client cancelled, which say so (docs/gateway.md, "Usage").
        return {"pt": self.prompt, "ct": self.completion, "ttft": ttft,
                "dur": (now - started) * 1000, "st": self.status or 500,
                "cx": self.cancelled, "err": self.error}  # fmt: skip


def _count(value) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


class _DisconnectWatcher:
    """Waits for the client's `http.disconnect` while the answer streams; when it comes,
    the upstream connection is closed (vLLM aborts the request)."""

    def __init__(self, receive, response):
        self.gone = False
        self._response = response
        self._task = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.gone = True
                self._response.abort()
                return

    def stop(self):
        self._task.cancel()


async def _read_body(receive, scope=None, check_key=None) -> bytes:
    """The request body, within GATEWAY_BODY_MAX_BYTES and REQUEST_BODY_TIMEOUT seconds.
    One deadline for the whole body (`asyncio.timeout`: a timer on this task, where
    `asyncio.wait_for` would wrap each read in a task of its own).

    Nobody makes the panel wait for a body it would refuse: a declared Content-Length over
    the limit is a 413 before any byte is read, and a body that does not come in one read
    (the common case: a small body arrives with the head) waits for `check_key()` first —
    a key that is invalid, revoked or expired is refused before its body trickles in."""
    limit = settings.GATEWAY_BODY_MAX_BYTES
    too_large = Refused(413, f"The request body is larger than {limit // 1_000_000} MB "
                        "(GATEWAY_BODY_MAX_MB); nothing was sent to a model.",
                        "invalid_request_error", "body_too_large")  # fmt: skip
    declared = _header(scope, b"content-length") if scope is not None else None
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    parts: list[bytes] = []
    size = 0
    deadline = settings.REQUEST_BODY_TIMEOUT
    try:
        async with asyncio.timeout(deadline):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise Refused(400, "The client went away.", "invalid_request_error",
                                  "disconnected")  # fmt: skip
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise too_large
                parts.append(chunk)
                if not message.get("more_body", False):
                    return parts[0] if len(parts) == 1 else b"".join(parts)
                if check_key is not None:
                    await check_key()
                    check_key = None
    except TimeoutError:
        raise Refused(408, f"The request body did not arrive within {deadline} s.",
                      "invalid_request_error", "timeout") from None  # fmt: skip


async def _send_json(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*_JSON, (b"content-length", str(len(body)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def _refusal(verdict: str, answer: list, model: str) -> Refused:
    said = refusals.refusal(verdict, answer, model)
    retry = said.retry_after_s
    headers = [(b"retry-after", str(retry).encode())] if retry is not None else []
    return Refused(said.status, said.message, said.type, said.code, headers=headers, counted=True)

"""The chat relay: browser ⇄ panel WebSocket ⇄ the run's OpenAI-compatible stream.

The browser never talks to vLLM (which has no authentication); it talks to this consumer,
which checks who it is and what they may touch, relays the answer as it streams, and saves
it. Deltas are coalesced into one message every COALESCE_S (with a sequence number so a
client can spot a gap and re-fetch the final text over HTTP). A client that does not read
fast enough gets coarser batches (what piles up while a send is pending goes out in the
next one), and one that stays stuck for SEND_TIMEOUT_S is closed and its upstream request
cancelled. Closing the upstream connection makes vLLM abort the request. The request body
and the reading of the stream are the panel's vLLM adapter's (`vllm_adapter.endpoints`,
`vllm_adapter.sse`): an error chunk from a dead engine ends the answer with vLLM's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import weakref

import httpx
from channels.db import database_sync_to_async
from django.conf import settings

from apps.accounts.roles import USE_CHAT
from apps.chat.models import Conversation, Message
from apps.core.consumers import CLOSE_FORBIDDEN, PanelSocket
from apps.gateway import chat_budget
from apps.hosts.clock import HostClock, run_clock
from apps.runs.models import Run, RunState
from vllm_adapter import endpoints, prompt_count, sse

COALESCE_S = 0.04
SEND_TIMEOUT_S = 5.0
MAX_INPUT_CHARS = 100_000
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_SLOW = 4408

_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def upstream_client() -> httpx.AsyncClient:
    """One shared async client per event loop (the server runs one): connection reuse and
    bounded pools. Connections belong to a loop, so a second loop gets its own client."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        client = _clients[loop] = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=5.0, read=None, write=10.0, pool=5.0),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            trust_env=False,
        )
    return client


def _db(fn):
    """Run a short ORM function off the event loop in the shared pool, not the single
    thread-sensitive executor: eight chats starting at once must not queue behind each
    other's 10 ms of SQLite work."""
    return database_sync_to_async(fn, thread_sensitive=False)


class ChatConsumer(PanelSocket):
    """Closed like every panel socket when its session signs out or the account loses
    chat (PanelSocket); the answer being streamed is then stopped and saved as such."""

    conversation_id: int
    relay: asyncio.Task | None = None

    async def connect(self) -> None:
        user = await self.authorise(USE_CHAT)
        if user is None:
            return
        self.conversation_id = int(self.scope["url_route"]["kwargs"]["pk"])
        owner = await database_sync_to_async(self._owner)()
        if owner is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        if owner != user.pk:  # only its owner writes into a conversation
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.accept()

    def _owner(self) -> int | None:
        return (
            Conversation.objects.filter(pk=self.conversation_id)
            .values_list("user_id", flat=True)
            .first()
        )

    async def disconnect(self, code: int) -> None:
        if self.relay is not None and not self.relay.done():
            self.relay.cancel()  # the browser went away: abort upstream at once
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.relay

    async def receive(self, text_data=None, bytes_data=None) -> None:
        try:
            message = json.loads(text_data or "")
            kind = message["type"]
        except (ValueError, KeyError, TypeError):
            await self._send({"type": "error", "error": "malformed message"})
            return
        if kind == "stop":
            if self.relay is not None and not self.relay.done():
                self.relay.cancel()
            return
        if kind not in ("send", "regenerate"):
            await self._send({"type": "error", "error": f"unknown message type {kind!r}"})
            return
        content, edit = message.get("content"), message.get("edit")
        if kind == "send":
            problem = _check_input(content, edit)
            if problem:
                await self._send({"type": "error", "error": problem})
                return
        if self.relay is not None and not self.relay.done():
            await self._send({"type": "error", "error": "wait for the answer, or stop it"})
            return
        prepared = await _db(_prepare)(
            self.conversation_id,
            content if kind == "send" else None,
            edit=edit if kind == "send" else None,
        )
        if "error" in prepared:
            await self._send({"type": "error", "error": prepared["error"]})
            return
        await self._send(
            {
                "type": "start",
                "user_message": prepared["user_message"],
                "message": prepared["assistant_id"],
                "replaced_from": prepared["replaced_from"],
            }
        )
        self.relay = asyncio.create_task(self._relay(prepared))

    async def _send(self, payload: dict) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
        # lands just as the send completes (CPython gh-86296).
        try:
            async with asyncio.timeout(SEND_TIMEOUT_S):
                await self.send(text_data=json.dumps(payload))
        except TimeoutError:
            # A client that stays behind is closed; its upstream request is cancelled.
            if self.relay is not None and not self.relay.done():
                self.relay.cancel()
            await self.close(code=CLOSE_TOO_SLOW)
            raise ConnectionError("the browser stopped reading") from None

    async def _relay(self, prepared: dict) -> None:
        message_id = prepared["assistant_id"]
        state = _StreamState()
        flusher = asyncio.create_task(self._flusher(message_id, state))
        status, error, ticket = "complete", "", None
        try:
            ticket = await _admit(prepared["user_id"], prepared["body"])
            await _stream(prepared["url"], prepared["body"], state, prepared["headers"])
        except chat_budget.ChatRefused as exc:  # over a limit: nothing is sent upstream
            status, error = "error", str(exc)
        except asyncio.CancelledError:
            status = "stopped"
        except _UpstreamError as exc:
            status, error = "error", str(exc)
        finally:
            # Let the flusher send what is pending and end by itself (a cancel could land
            # mid-send and lose the batch).
            state.finished = True
            state.wake.set()
            try:
                async with asyncio.timeout(SEND_TIMEOUT_S + 1):
                    await flusher
            except (TimeoutError, asyncio.CancelledError):
                flusher.cancel()
        try:
            if status == "complete" and state.finish_reason is None:
                status = "error"
                error = await _db(_cut_short)(prepared["run_id"])
            stats = state.stats(prepared["time_scale"])
            saved = await _db(_finish)(message_id, state, status, error, stats)
        finally:
            if ticket is not None:  # before the "done": the next question finds its slot free
                await _settle(ticket, prepared, state, status, error)
        # The socket may be gone (a stop by disconnect): the answer is saved either way.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._flush(message_id, state)
            await self._send(
                {
                    "type": "done",
                    "message": message_id,
                    "status": status,
                    "error": error,
                    "seq": state.seq,
                    "clock_label": prepared["clock_label"],
                    **saved,
                }
            )

    async def _flusher(self, message_id: int, state: _StreamState) -> None:
        """Send what arrived: at once when nothing went out in the last COALESCE_S (so the
        first token is not held for a timer tick), else at the end of that interval."""
        with contextlib.suppress(ConnectionError):
            while True:
                await state.wake.wait()
                wait = state.last_flush + COALESCE_S - time.monotonic()
                if wait > 0 and not state.finished:
                    await asyncio.sleep(wait)
                state.wake.clear()
                await self._flush(message_id, state)
                state.last_flush = time.monotonic()
                if state.finished and not state.pending_content and not state.pending_reasoning:
                    return

    async def _flush(self, message_id: int, state: _StreamState) -> None:
        if not state.pending_content and not state.pending_reasoning:
            return
        content, reasoning = "".join(state.pending_content), "".join(state.pending_reasoning)
        state.pending_content.clear()
        state.pending_reasoning.clear()
        state.seq += 1
        await self._send(
            {
                "type": "delta",
                "message": message_id,
                "seq": state.seq,
                "content": content,
                "reasoning": reasoning,
            }
        )


def _check_input(content, edit) -> str:
    """What is wrong with a message to send (or to send instead of message `edit`)."""
    if not isinstance(content, str) or not content.strip():
        return "write a message first"
    if len(content) > MAX_INPUT_CHARS:
        return f"at most {MAX_INPUT_CHARS:,} characters"
    if edit is not None and (not isinstance(edit, int) or isinstance(edit, bool) or edit < 1):
        return "say which message to edit"
    return ""


class _UpstreamError(Exception):
    pass


class _StreamState:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.first_token: float | None = None
        self.last_token: float | None = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.pending_content: list[str] = []
        self.pending_reasoning: list[str] = []
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self.token_events = 0
        self.server_status = 0  # the model server's answer status (0: no answer came)
        self.seq = 0
        self.wake = asyncio.Event()  # set when there is something to send, or at the end
        self.finished = False
        self.last_flush = 0.0

    def add(self, content: str, reasoning: str) -> None:
        now = time.monotonic()
        if self.first_token is None:
            self.first_token = now
        self.last_token = now
        self.token_events += 1  # one token per event (vLLM): the count of an answer cut short
        if content:
            self.content.append(content)
            self.pending_content.append(content)
        if reasoning:
            self.reasoning.append(reasoning)
            self.pending_reasoning.append(reasoning)
        self.wake.set()

    def stats(self, time_scale: float = 1.0) -> dict:
        """TTFT and tok/s in the host's time (apps/hosts/clock.py): on an N× simulated
        Spark the wall-clock figures are N× too fast, so they are scaled to what a real
        Spark would do, like the benchmarks'."""
        clock = HostClock(time_scale, simulated=time_scale != 1.0)
        usage = self.usage or {}
        ttft = clock.host_seconds(self.first_token - self.started) if self.first_token else None
        completion = usage.get("completion_tokens")
        tok_s = None
        if completion and completion > 1 and self.first_token and self.last_token:
            span = clock.host_seconds(self.last_token - self.first_token)
            tok_s = (completion - 1) / span if span > 0 else None
        return {
            "ttft_s": ttft,
            "tok_s": tok_s,
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": completion,
        }


async def _stream(url: str, body: dict, state: _StreamState, headers: dict) -> None:
    stall = settings.CHAT_STALL_TIMEOUT_S
    timeout = httpx.Timeout(connect=5.0, read=stall, write=10.0, pool=5.0)
    try:
        async with upstream_client().stream(
            "POST", url, json=body, headers=headers, timeout=timeout
        ) as response:
            state.server_status = response.status_code
            if response.status_code != 200:
                raise _UpstreamError(
                    f"the model server answered HTTP {response.status_code}: "
                    f"{endpoints.error_message(await response.aread())}"
                )
            decoder = sse.Decoder()
            async for data in response.aiter_bytes():
                for event in decoder.feed(data):
                    if _take(event, state):
                        return
            for event in decoder.close():
                if _take(event, state):
                    return
    except sse.StreamError as exc:
        if exc.kind == "stream_error":  # vLLM's error chunk: the engine failed the request
            raise _UpstreamError(f"the model server failed the answer: {exc}") from None
        raise _UpstreamError(f"the model server sent a malformed stream: {exc}") from None
    except httpx.TimeoutException:
        raise _UpstreamError(
            f"the model server sent nothing for {stall:g} s: it stalled or is overloaded"
        ) from None
    except httpx.HTTPError as exc:
        raise _UpstreamError(f"the connection to the model server broke: {exc}") from None


def _take(event: bytes, state: _StreamState) -> bool:
    """Read one event's chunk into ``state``; True at ``[DONE]``."""
    chunk = sse.parse_data(event)
    if chunk is None:
        return True
    usage = sse.usage(chunk)
    if usage:
        state.usage = usage
    for choice in chunk.get("choices") or ():
        content, reasoning = sse.delta_text(choice)
        if content or reasoning:
            state.add(content, reasoning)
        if choice.get("finish_reason"):
            state.finish_reason = choice["finish_reason"]
    return False


# --- database side (sync) ---------------------------------------------------------------


def _prepare(conversation_id: int, content: str | None, *, edit: int | None = None) -> dict:
    """Save what is asked and an empty answer to stream into; the request to make.

    `content` with `edit`: the user message `edit` is replaced by `content`, and what came
    after it is dropped (the conversation goes on from there). No `content`: regenerate,
    the last answer is dropped and the last question asked again."""
    conv = Conversation.objects.select_related("run", "run__recipe", "run__host").get(
        pk=conversation_id
    )
    run = conv.run
    if run is None or run.state != RunState.READY:
        state = "gone" if run is None else run.get_state_display().lower()
        return {"error": f"the model is not ready (its run is {state}): pick a ready run"}
    replaced = _replaced(conv, content, edit)
    if isinstance(replaced, str):
        return {"error": replaced}
    if replaced is not None:
        conv.messages.filter(pk__gte=replaced).delete()
    history = [{"role": "system", "content": conv.system_prompt}] if conv.system_prompt else []
    for m in conv.messages.exclude(status=Message.Status.STREAMING).exclude(content=""):
        history.append({"role": m.role, "content": m.content})
    user_message = None
    if content is not None:
        user_message = Message.objects.create(
            conversation=conv, role=Message.Role.USER, content=content, run=run
        ).as_dict()
        history.append({"role": "user", "content": content})
    assistant = Message.objects.create(
        conversation=conv, role=Message.Role.ASSISTANT, status=Message.Status.STREAMING, run=run
    )
    if not conv.title and content:
        conv.title = content.strip().splitlines()[0][:80]
    conv.save()
    clock = run_clock(run)
    return {
        "time_scale": clock.scale,
        "clock_label": clock.label,
        "user_message": user_message,
        "replaced_from": replaced,
        "assistant_id": assistant.pk,
        "run_id": run.pk,
        "user_id": conv.user_id,
        "host": run.host.name,
        "url": endpoints.url(run.local_endpoint, endpoints.CHAT_COMPLETIONS),
        "tokenize_url": endpoints.url(run.local_endpoint, endpoints.TOKENIZE),
        "headers": run.upstream_headers,
        "body": endpoints.chat_body(
            run.served_name,
            history,
            max_tokens=conv.max_tokens,
            stream=True,
            # Every chunk carries the running usage (vLLM's continuous_usage_stats): a
            # stopped answer knows the prompt tokens vLLM processed and the tokens it
            # generated, exactly, without the final usage chunk it never gets.
            continuous_usage=True,
            temperature=conv.temperature,
            top_p=conv.top_p,
        ),
    }


def _replaced(conv: Conversation, content: str | None, edit: int | None) -> int | str | None:
    """The first message an edit or a regeneration drops (None: nothing is dropped), or
    why it cannot be done."""
    if content is not None and edit is None:
        return None
    if edit is not None:
        target = conv.messages.filter(pk=edit, role=Message.Role.USER).first()
        return target.pk if target else "that message is not in this conversation"
    last = conv.messages.order_by("-created_at", "-pk").first()
    if last is None or last.role != Message.Role.ASSISTANT:
        return "there is no answer to regenerate"
    if last.status == Message.Status.STREAMING:
        return "wait for the answer, or stop it"
    return last.pk


def _cut_short(run_id: int) -> str:
    run = Run.objects.filter(pk=run_id).first()
    where = f" (run {run_id} is {run.get_state_display().lower()})" if run else ""
    return f"the model's server ended the answer early{where}"


def _finish(message_id: int, state: _StreamState, status: str, error: str, stats: dict) -> dict:
    fields = {
        "content": "".join(state.content),
        "reasoning": "".join(state.reasoning),
        "status": status,
        "error": error,
        "finish_reason": state.finish_reason or "",
        **stats,
    }
    Message.objects.filter(pk=message_id).update(**fields)
    return {k: v for k, v in fields.items() if k not in ("content", "reasoning")}


CHAT_STATUS = {"complete": 200, "stopped": 499}


async def _admit(user_id: int, body: dict) -> chat_budget.ChatTicket:
    """The user's limits, on the same counters as their API keys (apps/gateway/chat_budget.py):
    raises ChatRefused; a token budget nearly spent lowers the answer's max_tokens."""
    ticket = await chat_budget.admit(
        user_id, body["model"], len(json.dumps(body)), body["max_tokens"]
    )
    if ticket.cap is not None and ticket.cap < body["max_tokens"]:
        body["max_tokens"] = ticket.cap
    return ticket


async def _prompt_tokens(prepared: dict) -> int:
    """The prompt tokens of an answer that ended before any chunk told them (Stop during
    the prefill, a failure): the model server counts the same messages again (/tokenize),
    else they are estimated from their text (vllm_adapter/prompt_count.py) — as the
    gateway does."""
    body = prepared["body"]
    headers = {**prepared["headers"], "content-type": "application/json"}

    async def tokenize(one: bytes) -> bytes | None:
        try:
            response = await upstream_client().post(
                prepared["tokenize_url"], content=one, headers=headers,
                timeout=settings.GATEWAY_TOKENIZE_TIMEOUT_S,
            )  # fmt: skip
        except httpx.HTTPError:
            return None
        return response.content if response.status_code == 200 else None

    count, _ = await prompt_count.prompt_tokens(
        endpoints.CHAT_COMPLETIONS, body, body["model"], tokenize,
        timeout_s=settings.GATEWAY_TOKENIZE_TIMEOUT_S,
    )  # fmt: skip
    return count


async def _settle(
    ticket: chat_budget.ChatTicket, prepared: dict, state: _StreamState, status: str, error: str
) -> None:
    """A chat answer is a usage row like a request through the gateway (wall-clock times,
    tokens as the server counted them: the last chunk's running usage, which a stopped
    answer has too; else one per event received), queued in Redis. A stopped answer is
    cancelled, status 499 — not failed (apps/gateway/usage.py, docs/gateway.md)."""
    usage = state.usage or {}
    completion = usage.get("completion_tokens")
    prompt = usage.get("prompt_tokens")
    if prompt is None and state.server_status == 200:  # stopped or cut: prefilled all the same
        prompt = await _prompt_tokens(prepared)
    await chat_budget.settle(
        ticket,
        run_id=prepared["run_id"],
        host=prepared["host"],
        model=prepared["body"]["model"],
        prompt_tokens=prompt,
        completion_tokens=state.token_events if completion is None else completion,
        ttft_s=state.first_token - state.started if state.first_token else None,
        duration_s=time.monotonic() - state.started,
        status=CHAT_STATUS.get(status, 502),
        cancelled=status == "stopped",
        error=error,
    )

"""The gateway's door for the chat: a chat answer is counted like a request through `/v1`.

The same two Redis round trips as the gateway's (apps/gateway/store.py): `admit` before
the answer is asked for — the user's requests per minute, concurrent requests and tokens
per UTC day, on the same counters as their API keys, so chat and API together count
against one limit — and `settle` at its end, which frees the slot, replaces the token
reservation by the tokens really used and queues the usage row (source "chat") that
`usage.drain()` moves into the database like the gateway's.

The chat is admitted by a record of its own per user (``gw:key:chat-user-<id>``: the
user's role and limits, no key, no model allowlist, no expiry), read from the database
when missing or stale (apps/gateway/keys.py::record_for_user). A refusal reads as the
gateway's (apps/gateway/refusals.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from channels.db import database_sync_to_async

from apps.core.redisconn import RedisError
from apps.gateway import keys, refusals
from apps.gateway.store import AsyncStore

log = logging.getLogger(__name__)

REDIS_DOWN = (
    "the panel's Redis is unreachable: chat is counted there (requests, tokens and limits, "
    "like the API), so nothing was sent to the model; try again shortly"
)
_store = AsyncStore()
_pending: set[asyncio.Task] = set()  # releases that must finish even if their caller is gone


class ChatRefused(Exception):
    """An answer that may not start; ``str(exc)`` is what the user reads."""

    def __init__(self, message: str, code: str, retry_after_s: int | None = None):
        super().__init__(message)
        self.code = code
        self.retry_after_s = retry_after_s


@dataclass
class ChatTicket:
    user_id: int
    request_id: str
    day: int  # the UTC day (days since the epoch) its tokens are counted in
    reserved: int  # tokens reserved (prompt bound + max_tokens); 0 without a token budget
    cap: int | None  # max_tokens as the day's budget allows; None: no cap
    at: float = field(default_factory=time.time)  # when it was admitted (the row's time)


def digest(user_id: int) -> str:
    return f"chat-user-{user_id}"


async def admit(user_id: int, model: str, prompt_bound: int, max_tokens: int) -> ChatTicket:
    """Take the user's slot for one answer, or raise ChatRefused. A caller cancelled while
    Redis answers does not leak the slot: the admission is finished and released."""
    task = _keep(_admit(user_id, model, prompt_bound, max_tokens))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_release_orphan)
        raise


async def _admit(user_id: int, model: str, prompt_bound: int, max_tokens: int) -> ChatTicket:
    name, request_id = digest(user_id), uuid.uuid4().hex
    try:
        for _ in range(3):
            answer = await _store.admit(name, request_id, model, prompt_bound, max_tokens)
            verdict = answer[0]
            if verdict == "ok":
                cap = int(answer[3])
                return ChatTicket(
                    user_id, request_id, int(answer[5]), int(answer[4]), None if cap < 0 else cap
                )
            if verdict in ("miss", "stale"):
                read = database_sync_to_async(keys.record_for_user, thread_sensitive=False)
                await _store.fill(name, await read(user_id))
                continue
            said = refusals.refusal(verdict, answer, model)
            raise ChatRefused(said.message, said.code, said.retry_after_s)
    except RedisError as exc:
        log.error("chat: Redis is unreachable: %s", exc)
        raise ChatRefused(REDIS_DOWN, "redis_unavailable") from None
    raise ChatRefused("your limits kept changing while the answer was admitted; try again",
                      "retry")  # fmt: skip


def _release_orphan(task: asyncio.Task) -> None:
    if task.cancelled() or task.exception() is not None:
        return
    ticket = task.result()
    _keep(_release(ticket, 0, None, refund=True))


async def settle(
    ticket: ChatTicket,
    *,
    run_id: int | None,
    host: str,
    model: str,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    ttft_s: float | None,
    duration_s: float,
    status: int,
    cancelled: bool,
    error: str,
) -> None:
    """Free the answer's slot, settle its tokens and queue its usage row: once per
    ticket.
    Finishes even if the caller is cancelled meanwhile; Redis down: logged, not raised."""
    prompt, completion = prompt_tokens or 0, completion_tokens or 0
    row = {
        "id": ticket.request_id, "at": ticket.at, "u": ticket.user_id, "src": "chat",
        "m": model, "ep": "chat", "run": run_id, "h": host, "pt": prompt, "ct": completion,
        "ttft": ttft_s * 1000 if ttft_s is not None else None, "dur": duration_s * 1000,
        "st": status, "cx": cancelled, "err": error[:300],
    }  # fmt: skip
    await asyncio.shield(_keep(_release(ticket, prompt + completion, row, refund=False)))


def _keep(coro) -> asyncio.Task:
    task = asyncio.ensure_future(coro)
    _pending.add(task)
    task.add_done_callback(_pending.discard)
    return task


async def _release(ticket: ChatTicket, used: int, row: dict | None, *, refund: bool) -> None:
    try:
        await _store.release(ticket.user_id, ticket.request_id, ticket.day, ticket.reserved,
                             used, row, refund, run=(row or {}).get("run"))  # fmt: skip
    except RedisError as exc:
        log.error("chat: could not settle answer %s for user %s (its usage row is lost): %s",
                  ticket.request_id, ticket.user_id, exc)  # fmt: skip

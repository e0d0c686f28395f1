"""Writing the answers as vLLM writes them: JSON bodies (compact, as vLLM dumps them),
a streamed completion's SSE chunk sequence (recorded in /sparksim/trace), and a whole
completion's response object with every key vLLM's response models write."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import TYPE_CHECKING

from sparksim.engine import Event, SimRequest

if TYPE_CHECKING:  # the App that calls these; only its type (server imports this module)
    from sparksim.server import App

COMPACT = (",", ":")  # vLLM writes JSON without spaces


def _stream_start() -> dict:
    return {
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
        ],
    }


async def send_raw(send, status: int, body: bytes, content_type: str | None) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.insert(0, (b"content-type", content_type.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(send, status: int, obj) -> None:
    await send_raw(send, status, json.dumps(obj, separators=COMPACT).encode(), "application/json")


class CompletionStream:
    """vLLM's chunk sequence: (chat) a role chunk, one chunk per token whose last one
    carries the finish_reason, (include_usage) a usage chunk with no choices, then
    [DONE]. system_fingerprint rides on the last chunk before [DONE]."""

    def __init__(
        self, app: App, send, request: SimRequest, name: str, *, chat: bool, options: dict
    ) -> None:
        self.app, self.state, self.send = app, app.state, send
        self.request, self.name, self.chat = request, name, chat
        self.include_usage = bool(options.get("include_usage"))
        self.continuous = self.include_usage and bool(options.get("continuous_usage_stats"))
        self.created = int(time.time())
        self.obj = "chat.completion.chunk" if chat else "text_completion"
        self.traces = self.state.traces
        self.trace = self.traces.start(request.request_id)
        self.sent = 0  # tokens streamed so far

    async def run(self) -> None:
        request, faults = self.request, self.state.faults
        await self.send(_stream_start())
        stalled = False
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
            if self.chat and not role_sent:
                await self._role_chunk()
                role_sent = True
            done = finish is not None
            await self._chunk(
                self._token_choice(event, finish),
                tokens=len(event.token_ids),
                with_usage=self.continuous,
                last=done and not self.include_usage,
            )
            self.sent += len(event.token_ids)
            self.app.count_tokens(len(event.token_ids))
            if done:
                break
            if faults.stall_seconds and not stalled and self.sent >= faults.stall_after_tokens:
                stalled = True
                await asyncio.sleep(faults.stall_seconds / self.state.time_scale)
        if self.include_usage:
            await self._chunk(None, with_usage=True, last=True)
        await self.send({"type": "http.response.body", "body": b"data: [DONE]\n\n",
                         "more_body": False})  # fmt: skip

    def _usage(self, completion: int, details: bool) -> dict:
        # Counted as streamed, like vLLM's per-output counts: the engine may already
        # have produced tokens this stream has not sent yet.
        prompt = self.request.prompt_len
        out = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }
        if details:  # vLLM's per-chunk chat usage has this key, its final one not
            out["completion_tokens_details"] = None
        return out

    async def _chunk(
        self,
        choice: dict | None,
        *,
        tokens: int = 0,
        extra: dict | None = None,
        with_usage: bool = False,
        last: bool = False,
    ) -> None:
        payload = {
            "id": self.request.request_id,
            "object": self.obj,
            "created": self.created,
            "model": self.name,
            "choices": [choice] if choice is not None else [],
        }
        if with_usage:
            payload["usage"] = self._usage(self.sent + tokens, self.chat and choice is not None)
        if extra:
            payload.update(extra)
        if last:
            payload["system_fingerprint"] = self.state.fingerprint
        await self.send(
            {
                "type": "http.response.body",
                "body": b"data: " + json.dumps(payload, separators=COMPACT).encode() + b"\n\n",
                "more_body": True,
            }
        )
        if tokens:
            self.traces.add(self.trace, tokens)

    async def _role_chunk(self) -> None:
        await self._chunk(
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            },
            extra={"prompt_token_ids": None, "prompt_text": None},
            with_usage=self.continuous,
        )

    def _token_choice(self, event: Event, finish: str | None) -> dict:
        text = self.app.tokenizer.decode(event.token_ids)
        if self.chat:
            delta = {"reasoning": text} if event.reasoning else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            if finish:
                choice["stop_reason"] = None
            choice["token_ids"] = None
            return choice
        return {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
            "prompt_token_ids": None,
            "token_ids": None,
        }


async def whole_completion(app: App, send, request: SimRequest, name: str, *, chat: bool) -> None:
    """A completion answered in one response, once the engine finished it."""
    answer: list[int] = []
    reasoning: list[int] = []
    while True:
        event = await request.events.get()
        if event.kind == "finish":
            break
        (reasoning if event.reasoning else answer).extend(event.token_ids)
        app.count_tokens(len(event.token_ids))
    text = app.tokenizer.decode(answer)
    usage = {
        "prompt_tokens": request.prompt_len,
        "total_tokens": request.prompt_len + request.generated,
        "completion_tokens": request.generated,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    if chat:
        thought = app.tokenizer.decode(reasoning) if reasoning else None
        choice = _chat_choice(text, thought, request.finish_reason)
        tail = {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
        obj = "chat.completion"
    else:
        choice = _text_choice(text, request.finish_reason)
        tail = {}
        obj = "text_completion"
    await send_json(
        send,
        200,
        {
            "id": request.request_id,
            "object": obj,
            "created": int(time.time()),
            "model": name,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": app.state.fingerprint,
            "usage": usage,
            **tail,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        },
    )


# Every key vLLM's response models write, null where sparksim has nothing to say.
def _chat_choice(text: str, reasoning: str | None, finish_reason) -> dict:
    message = {
        "role": "assistant",
        "content": text,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": reasoning,
    }
    return {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
        "token_ids": None,
        "routed_experts": None,
    }


def _text_choice(text: str, finish_reason) -> dict:
    return {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
        "token_ids": None,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "routed_experts": None,
    }

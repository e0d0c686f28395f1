"""vLLM's Responses API, ``POST /v1/responses``, as sparksim answers it.

The shapes are vLLM's (``vllm/entrypoints/openai/responses/``; recorded from vLLM 0.32's
CPU server serving a tiny model): a whole answer is one ``response`` object with every key
vLLM writes; a streamed one is server-sent events each with an ``event:`` line —
``response.created``, ``response.in_progress``, ``response.output_item.added``,
``response.content_part.added``, one ``response.output_text.delta`` per engine step that
made text, ``response.output_text.done``, ``response.content_part.done``,
``response.output_item.done``, ``response.completed`` (its ``response`` carries the usage)
— numbered by ``sequence_number``, and no ``[DONE]``. An answer cut by its token limit is
``status: "incomplete"`` with ``incomplete_details: {"reason": "max_output_tokens"}``.

The input is a string (one user message) or a list of messages (``role`` and ``content``:
a string or ``input_text`` parts); ``instructions`` become a system message. Not
simulated: tools, reasoning items (sparksim answers text only here), stored responses
(``GET /v1/responses/{id}``: vLLM keeps none unless its store is enabled).
"""

from __future__ import annotations

import json
import time
import uuid

from sparksim.openai_requests import ApiError, request_validation, vllm_validation
from sparksim.openai_responses import COMPACT, send_json

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


def messages(body: dict) -> list[dict]:
    """The chat messages a Responses request stands for."""
    if "input" not in body:
        # vLLM's before-validators ran first: without tools, tool_choice auto becomes "none"
        # (ResponsesRequest.check_tool_usage), so the input it reports has that key too.
        seen = dict(body)
        if not body.get("tools") and body.get("tool_choice", "auto") in ("auto", "none"):
            seen["tool_choice"] = "none"
        raise request_validation(("body.input", "missing", "Field required", seen))
    given = body["input"]
    out: list[dict] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        out.append({"role": "system", "content": instructions})
    if isinstance(given, str):
        out.append({"role": "user", "content": given})
        return out
    if not isinstance(given, list):
        raise ApiError(400, "'input' must be a string or a list of messages.", param="input")
    for item in given:
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise ApiError(400, "Each input item must be a message with a role.", param="input")
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        out.append({"role": item["role"], "content": content if isinstance(content, str) else ""})
    return out


def chat_body(body: dict, limit: int) -> dict:
    """The request as the engine takes a chat one: max_output_tokens as its token limit
    (checked against the context with vLLM's words for this endpoint)."""
    asked = body.get("max_output_tokens")
    if asked is not None and (not isinstance(asked, int) or isinstance(asked, bool)):
        raise request_validation(("body.max_output_tokens", "int_type",
                                  "Input should be a valid integer", asked))  # fmt: skip
    if isinstance(asked, int) and asked > limit:
        raise vllm_validation(
            f"max_output_tokens={asked} cannot be greater than max_model_len={limit}. "
            "Please request fewer output tokens.",
            "max_output_tokens",
            asked,
        )
    out = {key: body[key] for key in ("temperature", "seed", "ignore_eos") if key in body}
    if asked is not None:
        out["max_tokens"] = asked
    return out


class ResponseWriter:
    """One Responses answer: the object, its usage and, streamed, its events."""

    def __init__(self, body: dict, name: str, prompt_len: int) -> None:
        self.body, self.name, self.prompt_len = body, name, prompt_len
        self.id = "resp_" + uuid.uuid4().hex[:16]
        self.item_id = "msg_" + uuid.uuid4().hex[:16]
        self.created = int(time.time())
        self.sequence = 0

    def response(self, status: str, text: str | None, generated: int | None,
                 finish_reason: str | None = None) -> dict:  # fmt: skip
        """The response object: in progress (no output, no usage) or final."""
        final = text is not None
        incomplete = {"reason": "max_output_tokens"} if finish_reason == "length" else None
        max_output = self.body.get("max_output_tokens")
        return {
            "id": self.id, "created_at": self.created, "incomplete_details": incomplete,
            "instructions": self.body.get("instructions"), "metadata": self.body.get("metadata"),
            "model": self.name, "object": "response",
            "output": [self.item(text, "completed")] if final else [],
            "parallel_tool_calls": True,
            "temperature": float(self.body.get("temperature", 1.0) or 0.0),
            "tool_choice": "none", "tools": [], "top_p": 1.0, "background": False,
            "max_output_tokens": max_output if isinstance(max_output, int) else None,
            "max_tool_calls": None, "previous_response_id": None, "prompt": None,
            "reasoning": None, "service_tier": "auto",
            "status": ("incomplete" if incomplete else "completed") if final else status,
            "text": None, "top_logprobs": None, "truncation": "disabled",
            "usage": self.usage(generated) if final else None, "user": None,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "kv_transfer_params": None,
            "ec_transfer_params": None, "input_messages": None, "output_messages": None,
        }  # fmt: skip

    def item(self, text: str | None, status: str) -> dict:
        content = [] if text is None else [self.part(text, logprobs=None)]
        return {"id": self.item_id, "content": content, "role": "assistant", "status": status,
                "type": "message", "phase": None}  # fmt: skip

    @staticmethod
    def part(text: str, logprobs) -> dict:
        return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}

    def usage(self, generated: int | None) -> dict:
        out = generated or 0
        return {
            "input_tokens": self.prompt_len,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0,
                                     "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0,
                                      "output_tokens_per_turn": [],
                                      "tool_output_tokens_per_turn": []},
            "total_tokens": self.prompt_len + out,
        }  # fmt: skip

    def event(self, kind: str, payload: dict) -> bytes:
        # vLLM's event models write their fields in alphabetical order.
        data = dict(sorted({**payload, "sequence_number": self.sequence, "type": kind}.items()))
        self.sequence += 1
        return (f"event: {kind}\ndata: ".encode() + json.dumps(data, separators=COMPACT).encode()
                + b"\n\n")  # fmt: skip

    def opening(self) -> bytes:
        head = self.response("in_progress", None, None)
        return b"".join([
            self.event("response.created", {"response": head}),
            self.event("response.in_progress", {"response": head}),
            self.event("response.output_item.added",
                       {"item": self.item(None, "in_progress"), "output_index": 0}),
            self.event("response.content_part.added",
                       {"content_index": 0, "item_id": self.item_id, "output_index": 0,
                        "part": self.part("", logprobs=[])}),
        ])  # fmt: skip

    def delta(self, text: str) -> bytes:
        return self.event("response.output_text.delta",
                          {"content_index": 0, "delta": text, "item_id": self.item_id,
                           "logprobs": [], "output_index": 0})  # fmt: skip

    def closing(self, text: str, generated: int, finish_reason: str | None) -> bytes:
        return b"".join([
            self.event("response.output_text.done",
                       {"content_index": 0, "item_id": self.item_id, "logprobs": [],
                        "output_index": 0, "text": text}),
            self.event("response.content_part.done",
                       {"content_index": 0, "item_id": self.item_id, "output_index": 0,
                        "part": self.part(text, logprobs=None)}),
            self.event("response.output_item.done",
                       {"item": self.item(text, "completed"), "output_index": 0}),
            self.event("response.completed",
                       {"response": self.response("completed", text, generated, finish_reason)}),
        ])  # fmt: skip


async def answer(app, send, request, body: dict, name: str) -> None:
    """Answer the engine's `request` as vLLM's Responses API does, whole or streamed."""
    writer = ResponseWriter(body, name, request.prompt_len)
    tokenizer = app.tokenizer
    if body.get("stream") is not True:
        ids: list[int] = []
        while True:
            event = await request.events.get()
            if event.kind == "finish":
                break
            ids.extend(event.token_ids)
            app.count_tokens(len(event.token_ids))
        text = tokenizer.decode(ids)
        await send_json(send, 200, writer.response("completed", text, request.generated,
                                                   request.finish_reason))  # fmt: skip
        return
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    await send({"type": "http.response.body", "body": writer.opening(), "more_body": True})
    ids = []
    while True:
        event = await request.events.get()
        if event.kind == "finish":
            if request.aborted or event.finish_reason == "abort":
                return
            break
        ids.extend(event.token_ids)
        app.count_tokens(len(event.token_ids))
        await send({"type": "http.response.body", "body": writer.delta(
            tokenizer.decode(event.token_ids)), "more_body": True})  # fmt: skip
    text = tokenizer.decode(ids)
    tail = writer.closing(text, request.generated, request.finish_reason)
    await send({"type": "http.response.body", "body": tail, "more_body": False})

"""vllm_adapter.sse: the one SSE decoder and chunk reader of the panel (chat relay,
benchmark harness, sparksim's probe). The framing facts are vLLM's: `data: <json>\\n\\n`
per chunk, `data: [DONE]\\n\\n` at the end, and one error chunk when the engine fails a
request after the 200 (vllm/entrypoints/openai/chat_completion/serving.py). The last
test has real vLLM's own protocol classes write the chunks."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import require_service
from vllm_adapter import sse
from vllm_adapter.sse import Decoder, StreamError, parse_data


def _events(*chunks: dict | str) -> bytes:
    return b"".join(sse.DONE_EVENT if c == "[DONE]" else sse.encode(c) for c in chunks)


def _decode_in(pieces: list[bytes], **kwargs) -> list[bytes]:
    decoder = Decoder(**kwargs)
    out = []
    for piece in pieces:
        out.extend(decoder.feed(piece))
    return out + list(decoder.close())


def _split_everywhere(stream: bytes):
    """The stream in two reads, at every byte; then one byte per read."""
    for cut in range(len(stream) + 1):
        yield [stream[:cut], stream[cut:]]
    yield [stream[i : i + 1] for i in range(len(stream))]


CHUNKS = [
    {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
    {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
]


def test_one_event_per_read_as_vllm_writes_them():
    decoder = Decoder()
    got = [decoder.feed(sse.encode(c)) for c in CHUNKS]
    assert [[json.loads(d) for d in ds] for ds in got] == [[c] for c in CHUNKS]
    assert decoder.feed(sse.DONE_EVENT) == [b"[DONE]"]
    assert parse_data(b"[DONE]") is None and not decoder.close()


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_events_split_at_any_byte_decode_the_same(line_end):
    stream = _events(*CHUNKS, "[DONE]").replace(b"\n", line_end)
    want = [*(json.dumps(c, separators=(",", ":")).encode() for c in CHUNKS), b"[DONE]"]
    for pieces in _split_everywhere(stream):
        assert _decode_in(pieces) == want, pieces


def test_a_crlf_split_between_two_reads_is_one_line_end_not_two():
    decoder = Decoder()
    assert not decoder.feed(b'data: {"a": 1}\r')
    assert not decoder.feed(b"\n")  # one line end so far: the event is not over
    assert not decoder.feed(b"\r")
    assert decoder.feed(b"\ndata: [DONE]\r\n\r\n") == [b'{"a": 1}', b"[DONE]"]


def test_comments_other_fields_and_multi_line_data():
    stream = (
        b": ping\n\n"  # a keep-alive comment: no event
        b'event: message\nid: 7\nretry: 1000\ndata: {"a":\ndata: 1}\n\n'  # joined by \n
        b'data:{"b":2}\n\n'  # no space after the colon
        b"data\n\n"  # an empty data line
        b"\n\n\n"  # stray blank lines
        b"database: not a data field\n\n"
    )
    assert _decode_in([stream]) == [b'{"a":\n1}', b'{"b":2}', b""]
    assert parse_data(b'{"a":\n1}') == {"a": 1}


def test_a_last_event_without_its_blank_line_still_counts_and_a_cut_one_is_malformed():
    assert _decode_in([b'data: {"a": 1}\n\ndata: {"b": 2}']) == [b'{"a": 1}', b'{"b": 2}']
    decoder = Decoder()
    decoder.feed(b'data: {"b": 2')
    with pytest.raises(StreamError) as cut:
        parse_data(decoder.close()[0])
    assert cut.value.kind == "malformed_sse"


def test_done_with_spaces_and_not_json():
    assert parse_data(b" [DONE] ") is None
    for data in (b"{not json}", b"", b"hello"):
        with pytest.raises(StreamError) as bad:
            parse_data(data)
        assert bad.value.kind == "malformed_sse"
    with pytest.raises(StreamError) as array:
        parse_data(b"[1, 2]")
    assert array.value.kind == "malformed_sse" and "not a JSON object" in str(array.value)


def test_the_error_chunk_of_a_dead_engine_raises_with_vllms_message():
    # The shape vLLM writes (create_streaming_error_response: json.dumps of ErrorResponse).
    data = json.dumps(
        {
            "error": {
                "message": "EngineCore encountered an issue. See stack trace (above) "
                "for the root cause.",
                "type": "InternalServerError",
                "param": None,
                "code": 500,
            }
        }
    ).encode()
    decoder = Decoder()
    events = decoder.feed(sse.encode(CHUNKS[1]) + b"data: " + data + b"\n\n" + sse.DONE_EVENT)
    assert parse_data(events[0])["choices"][0]["delta"]["content"] == "Hel"
    with pytest.raises(StreamError) as err:
        parse_data(events[1])
    assert err.value.kind == "stream_error"
    assert str(err.value).startswith("EngineCore encountered an issue")
    assert parse_data(events[2]) is None
    # An error field beside choices is a chunk, not the error chunk.
    assert parse_data(b'{"choices": [{"index": 0, "text": "x"}], "error": null}')


def test_an_oversized_event_is_refused_and_the_buffer_dropped():
    decoder = Decoder(max_event_bytes=1000)
    decoder.feed(b'data: {"x": "' + b"a" * 600)
    with pytest.raises(StreamError) as big:
        decoder.feed(b"a" * 600)
    assert big.value.kind == "oversized_event" and "1000 bytes" in str(big.value)
    assert decoder.feed(b'data: {"ok": 1}\n\n') == [b'{"ok": 1}']  # it starts clean
    # A long stream of normal events never trips it: the bound is per event.
    many = _events(*(CHUNKS * 100))
    assert (
        len(_decode_in([many[i : i + 700] for i in range(0, len(many), 700)], max_event_bytes=1000))
        == 400
    )
    # Nor does a complete event in one read that is longer than the bound.
    assert Decoder(max_event_bytes=10).feed(sse.encode({"x": "y" * 50})) != []
    # With the default bound a megabyte without an end fails, not grows.
    decoder = Decoder()
    with pytest.raises(StreamError):
        for _ in range(20):
            decoder.feed(b"data: " + b"x" * 65536)


def test_chunk_fields():
    role, content, finish, usage_only = CHUNKS
    reasoning = {"choices": [{"delta": {"reasoning": "think"}}]}
    reasoning_old = {"choices": [{"delta": {"reasoning_content": "think"}}]}  # vLLM < 0.11
    completion = {"choices": [{"index": 0, "text": "x", "finish_reason": None}]}
    assert sse.delta_text(role["choices"][0]) == ("", "")
    assert sse.delta_text(content["choices"][0]) == ("Hel", "")
    assert sse.delta_text(reasoning["choices"][0]) == ("", "think")
    assert sse.delta_text(reasoning_old["choices"][0]) == ("", "think")
    assert sse.delta_text(completion["choices"][0]) == ("x", "")
    assert [sse.has_text(c["choices"][0]) for c in (role, content, reasoning, reasoning_old,
                                                     completion)] == [False, True, True, True,
                                                                      True]  # fmt: skip
    assert sse.finish_reason(finish) == "stop" and sse.finish_reason(content) is None
    assert sse.finish_reason(usage_only) is None
    assert sse.usage(usage_only) == {"prompt_tokens": 3, "completion_tokens": 2}
    assert sse.usage(content) is None


def test_encode_is_compact_like_vllms_pydantic_dump():
    assert sse.encode({"a": [1, None]}) == b'data: {"a":[1,null]}\n\n'


# --- vLLM's own serializers ---------------------------------------------------------------

# Runs in the real vLLM's venv: the chunks as vLLM's protocol classes serialise them and
# the way its stream generators frame them (chat_completion/serving.py, 0.32).
_VLLM_CHUNKS = r"""
import json
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionResponseStreamChoice, ChatCompletionStreamResponse)
from vllm.entrypoints.openai.completion.protocol import (
    CompletionResponseStreamChoice, CompletionStreamResponse)
from vllm.entrypoints.generate.base.protocol import DeltaMessage
from vllm.entrypoints.serve.engine.protocol import UsageInfo
from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
from vllm.v1.engine.exceptions import EngineDeadError

def chat(delta, finish=None, n=0):
    c = ChatCompletionStreamResponse(id="chatcmpl-1", object="chat.completion.chunk",
        created=1, model="m", choices=[ChatCompletionResponseStreamChoice(
            index=0, delta=delta, logprobs=None, finish_reason=finish)])
    c.usage = UsageInfo(prompt_tokens=5, completion_tokens=n, total_tokens=5 + n)
    return c.model_dump_json(exclude_unset=True)

events = [chat(DeltaMessage(role="assistant", content="")),
          chat(DeltaMessage(reasoning="Hmm"), n=1), chat(DeltaMessage(content="Hi"), n=2),
          chat(DeltaMessage(content=""), "length", n=2),
          ChatCompletionStreamResponse(id="chatcmpl-1", created=1, model="m", choices=[],
              usage=UsageInfo(prompt_tokens=5, completion_tokens=2, total_tokens=7)
          ).model_dump_json(exclude_unset=True, exclude_none=True),
          json.dumps(create_error_response(EngineDeadError()).model_dump()),
          CompletionStreamResponse(id="cmpl-1", created=1, model="m", choices=[
              CompletionResponseStreamChoice(index=0, text="x", logprobs=None,
                                             finish_reason=None)]
          ).model_dump_json(exclude_unset=True)]
print("".join(f"data: {data}\n\n" for data in events) + "data: [DONE]\n\n", end="")
"""


@pytest.fixture(scope="module")
def vllm_stream() -> bytes:
    from tests.real_vllm.fixtures import VLLM_PYTHON

    require_service(VLLM_PYTHON.is_file(), f"real vLLM's Python ({VLLM_PYTHON})")
    done = subprocess.run([str(VLLM_PYTHON), "-c", _VLLM_CHUNKS], capture_output=True,
                          timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout


@pytest.mark.real_vllm
def test_chunks_written_by_vllms_own_protocol_classes(vllm_stream):
    for pieces in ([vllm_stream], [vllm_stream[i : i + 7] for i in range(0, len(vllm_stream), 7)]):
        events = _decode_in(pieces)
        assert len(events) == 8
        role, reasoning, content, finish, usage_only = map(parse_data, events[:5])
        assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert not sse.has_text(role["choices"][0])
        assert sse.delta_text(reasoning["choices"][0]) == ("", "Hmm")
        assert sse.delta_text(content["choices"][0]) == ("Hi", "")
        assert sse.finish_reason(finish) == "length" and sse.finish_reason(content) is None
        assert usage_only["choices"] == []
        assert sse.usage(usage_only) == {"prompt_tokens": 5, "total_tokens": 7,
                                         "completion_tokens": 2}  # fmt: skip
        with pytest.raises(StreamError) as dead:
            parse_data(events[5])
        assert dead.value.kind == "stream_error"
        assert "EngineCore encountered an issue" in str(dead.value)
        assert sse.delta_text(parse_data(events[6])["choices"][0]) == ("x", "")
        assert parse_data(events[7]) is None


@pytest.mark.real_vllm
def test_the_benchmark_harness_reads_vllms_chunks_and_fails_at_its_error_chunk(vllm_stream):
    from apps.benchmarks.harness import StreamParser

    parser = StreamParser()
    with pytest.raises(StreamError) as dead:
        for i in range(0, len(vllm_stream), 50):
            parser.feed(vllm_stream[i : i + 50], float(i))
    assert dead.value.kind == "stream_error"
    # Before the error chunk: the reasoning and the content chunk, one token each (by
    # the continuous usage), the finish reason, and the final usage.
    assert parser.tokens == [1, 1] and parser.finish_reason == "length"
    assert parser.usage == {"prompt_tokens": 5, "total_tokens": 7, "completion_tokens": 2}
    assert parser.response_id == "chatcmpl-1" and not parser.done


@pytest.mark.real_vllm
def test_the_chat_relay_keeps_the_partial_answer_and_reports_vllms_error(vllm_stream):
    """The relay's upstream reader against a local server that answers with the bytes vLLM
    wrote: the reasoning and content before the error chunk are kept, and the error says
    what vLLM said."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from apps.chat import consumers
    from tests.conftest import run_async

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for i in range(0, len(vllm_stream), 64):  # in pieces, as a socket delivers it
                self.wfile.write(vllm_stream[i : i + 64])
                self.wfile.flush()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"

        async def relay():
            state = consumers._StreamState()
            try:
                await consumers._stream(url, {"model": "m", "messages": []}, state, {})
            except consumers._UpstreamError as exc:
                return state, str(exc)
            return state, None

        state, error = run_async(relay())
    finally:
        server.shutdown()
        server.server_close()
    assert error is not None and "EngineCore encountered an issue" in error
    assert "".join(state.reasoning) == "Hmm" and "".join(state.content) == "Hi"
    assert state.finish_reason == "length" and state.usage["completion_tokens"] == 2

"""The gateway's stream tap (vllm_adapter/relay.py): what it forwards, whatever the reads,
in time linear in what passes, within its bounds."""

from __future__ import annotations

import json
import time

import pytest

from vllm_adapter.relay import Budget, StreamTap, TapError


def _chunk(text: str) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "model": "served",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}  # fmt: skip
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


USAGE = b'data: {"id":"c","model":"served","choices":[],"usage":{"prompt_tokens":7,' \
        b'"completion_tokens":3,"total_tokens":10}}\n\n'  # fmt: skip
STREAM = (
    b'data: {"id":"c","model":"served","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":""}}]}\n\n' + _chunk("a") + _chunk("b\n\nc") + _chunk("d") + USAGE
    + b"data: [DONE]\n\n"
)  # fmt: skip
RENAME = (b'"model":"served"', b'"model":"public"')


def _through(tap: StreamTap, reads: list[bytes]) -> bytes:
    return b"".join(tap.feed(r) for r in reads) + tap.close()


def _expected() -> bytes:
    return STREAM.replace(USAGE, b"").replace(*RENAME)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(STREAM)])
def test_any_split_of_the_reads_forwards_the_same_events(size):
    reads = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    tap = StreamTap(drop_usage=True, rename=RENAME)
    assert _through(tap, reads) == _expected()
    assert tap.usage == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert tap.done and tap.first_token_at is not None


def test_every_two_way_split_forwards_the_same_events():
    for cut in range(1, len(STREAM)):
        tap = StreamTap(drop_usage=True, rename=RENAME)
        assert _through(tap, [STREAM[:cut], STREAM[cut:]]) == _expected(), cut


def _cpu_for_one_event(size: int) -> float:
    tap = StreamTap(drop_usage=False, max_event_bytes=size + 1024)
    piece = b"a" * 65536
    started = time.process_time()
    tap.feed(b'data: {"x":"')
    for _ in range(size // len(piece)):
        tap.feed(piece)
    tap.feed(b'"}\n\n')
    return time.process_time() - started


def test_one_long_event_costs_time_linear_in_its_size():
    """An unfinished event used to be re-joined and searched whole at every read: 200 MiB
    in 64 KiB reads took 98 s of CPU. 8x the bytes must cost about 8x, not 64x."""
    small = min(_cpu_for_one_event(4 << 20) for _ in range(3))
    large = min(_cpu_for_one_event(32 << 20) for _ in range(3))
    assert large / max(small, 1e-4) < 24, (small, large)


def test_an_event_past_its_bound_is_refused():
    tap = StreamTap(drop_usage=False, max_event_bytes=1000)
    tap.feed(b"data: " + b"a" * 900)
    with pytest.raises(TapError) as caught:
        tap.feed(b"a" * 200)
    assert caught.value.kind == "oversized_event"


def test_more_events_than_the_answer_can_have_are_refused():
    tap = StreamTap(drop_usage=False, max_events=10)
    tap.feed(_chunk("x") * 10)
    with pytest.raises(TapError) as caught:
        tap.feed(_chunk("x"))
    assert caught.value.kind == "too_many_events"


def test_an_answer_past_its_byte_bound_is_refused():
    tap = StreamTap(drop_usage=False, max_bytes=len(STREAM) - 1)
    with pytest.raises(TapError) as caught:
        tap.feed(STREAM)
    assert caught.value.kind == "too_long"


def test_unfinished_events_take_from_the_process_budget_and_give_it_back():
    budget = Budget(1000)
    first, second = StreamTap(drop_usage=False, budget=budget), StreamTap(drop_usage=False,
                                                                           budget=budget)  # fmt: skip
    first.feed(b"data: " + b"a" * 594)  # 600 held
    with pytest.raises(TapError) as caught:
        second.feed(b"data: " + b"b" * 494)  # 500 more would pass 1000
    assert caught.value.kind == "busy"
    assert first.feed(b'"\n\n') and budget.held == 0  # finished: given back
    second.feed(b"data: x")
    second.close()
    second.close()
    assert budget.held == 0

"""Multi-turn chat sessions (apps/benchmarks/harness/sessions.py) on sparksim: each turn
sends the conversation back, so its prompt grows by the answer before it; the think time
separates the turns; the prefix cache serves what a session has already sent."""

from __future__ import annotations

import itertools

import pytest

from apps.benchmarks.harness.types import Lengths, Sessions, level_refusal
from tests.benchmarks.test_arrivals import FAST, small_sim  # noqa: F401 - a fixture
from tests.benchmarks.test_harness import level, spec

TURNS, QUESTION, ANSWER = 3, 50, 40


@pytest.fixture(scope="module")
def chats(small_sim):  # noqa: F811
    sessions = Sessions(TURNS, think_s=2, question_tokens=QUESTION)
    return level(small_sim, spec(300, ANSWER, concurrency=2, requests=11, warmup=2,
                                 sessions=sessions), FAST)  # fmt: skip


def by_session(result) -> list[list]:
    rows = sorted(result.details, key=lambda r: r.index)
    return [rows[i : i + TURNS] for i in range(0, len(rows), TURNS)]


def test_a_session_prompt_grows_by_each_turns_answer(chats):
    assert chats.error is None and chats.ok == 12 and chats.failed == 0  # 11 → 4 whole sessions
    sessions = by_session(chats)
    assert len(sessions) == 4
    growth = set()
    for turns in sessions:
        assert [r.turn for r in turns] == [1, 2, 3]
        assert turns[0].prompt_tokens == 300 and not any(r.prompt_mismatch for r in turns)
        assert all(r.output_tokens == ANSWER for r in turns)
        for before, after in itertools.pairwise(turns):
            # the answer the server gave, the new question and the template around them
            growth.add(after.prompt_tokens - before.prompt_tokens - before.output_tokens)
    assert len(growth) == 1 and QUESTION <= growth.pop() <= QUESTION + 32
    assert [r["turn"] for r in chats.requests].count(1) == 4  # kept on the stored rows


def test_the_think_time_separates_a_sessions_turns(chats):
    for turns in by_session(chats):
        for before, after in itertools.pairwise(turns):
            # 2 simulated seconds at 10×: at least 0.2 s of wall time between them
            assert after.sent_at - before.end_at >= 2 / FAST - 0.005


def test_later_turns_are_served_from_the_prefix_cache(chats, small_sim):  # noqa: F811
    assert chats.server["prefix_hit_rate"] > 0.4
    single = level(small_sim, spec(300, ANSWER, concurrency=2, requests=6, warmup=2), FAST)
    assert single.server["prefix_hit_rate"] < 0.1


@pytest.mark.parametrize(
    ("change", "message"),
    [({"endpoint": "completions"}, "chat endpoint only"),
     ({"warm_prefix": True}, "no warm or shared prefix"),
     ({"lengths": Lengths("uniform", 0.2)}, "no warm or shared prefix")],
)  # fmt: skip
def test_sessions_refuse_what_would_not_be_a_conversation(change, message):
    assert message in level_refusal(spec(300, 40, sessions=Sessions(3), **change))


def test_sessions_must_fit_the_context_at_their_last_turn():
    long = spec(1000, 500, sessions=Sessions(8, question_tokens=100))
    refusal = level_refusal(long, max_model_len=4096)
    assert "the last of 8 turns" in refusal and "4,096" in refusal
    assert level_refusal(long, max_model_len=65536) is None
    with pytest.raises(ValueError, match="2 to 32 turns"):
        Sessions(1)
    with pytest.raises(ValueError, match="think time"):
        Sessions(2, think_s=-1)

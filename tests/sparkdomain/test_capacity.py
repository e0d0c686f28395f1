"""One capacity story (issue 43): memory, --max-num-seqs and latency, and which binds; the
latency bound's arithmetic from first principles."""

import pytest

from sparkdomain.capacity import (
    LATENCY,
    MEMORY,
    SCHEDULER,
    MeasuredLatency,
    capacity_story,
)
from sparkdomain.planner.budget import KvSizes
from sparkdomain.planner.roofline import users_at_rate
from sparkdomain.spark import BANDWIDTH_GBS, DECODE_BANDWIDTH_SHARE, GB, GRAPH_STEP_SECONDS


def test_users_at_rate_is_the_largest_batch_whose_every_stream_keeps_the_rate():
    # 10 GB of active weights and 1 GB of KV per stream: a step of n streams reads
    # 10 + n GB at 64.5 % of 273 GB/s (176.1 GB/s) plus 0.55 ms; every stream gets one
    # token a step, so ≥ 10 tok/s each needs a step ≤ 0.1 s: 10 + n ≤ 17.51 → n = 7.
    kv = KvSizes(element_bytes=1, per_token=1.0, per_sequence=1 * GB, state_per_sequence=0.0)
    assert users_at_rate(10 * GB, kv, 1, 10.0, BANDWIDTH_GBS) == 7
    reach = BANDWIDTH_GBS * GB * DECODE_BANDWIDTH_SHARE
    for n, fast_enough in ((7, True), (8, False)):
        step = (10 * GB + n * GB) / reach + GRAPH_STEP_SECONDS
        assert (1 / step >= 10.0) is fast_enough
    # Over two Sparks each reads half the weights: 5 + n ≤ 17.51 → n = 12.
    assert users_at_rate(10 * GB, kv, 2, 10.0, BANDWIDTH_GBS) == 12
    # A model too big to give one stream the rate: 0, not None.
    assert users_at_rate(30 * GB, kv, 1, 10.0, BANDWIDTH_GBS) == 0
    # Unknown KV or active weights: unknown.
    unknown = KvSizes(element_bytes=1, per_token=None, per_sequence=None, state_per_sequence=0)
    assert users_at_rate(10 * GB, unknown, 1, 10.0, BANDWIDTH_GBS) is None
    assert users_at_rate(None, kv, 1, 10.0, BANDWIDTH_GBS) is None


def _bound(story, kind):
    return next(b for b in story.bounds if b.kind == kind)


def test_the_smallest_bound_binds_and_the_headline_says_which():
    # The "team of 5 at 8K": memory 608 planned, 1,068 measured, the SLO 2 users.
    measured = MeasuredLatency(2, 2.0, 10.0, 8, "job 3 on spark-1")
    story = capacity_story(
        max_num_seqs=5, memory_planned=608, memory_measured=1068.5,
        memory_source="run 4 on spark-1", latency_predicted=40, latency_measured=measured,
    )  # fmt: skip
    assert story.binding.kind == LATENCY and story.users == 2
    assert story.headline.startswith("The latency SLO, not memory, is the limit: 2 users")
    assert "Memory holds 1,068 at full context; --max-num-seqs admits 5" in story.headline
    assert _bound(story, MEMORY).users == 1068 and _bound(story, MEMORY).measured
    assert "(planned 608)" in _bound(story, MEMORY).text
    # Nothing measured: the plan's numbers, and the SLO "will be" the limit.
    planned = capacity_story(max_num_seqs=256, memory_planned=80, latency_predicted=3)
    assert planned.binding.kind == LATENCY and not planned.binding.measured
    assert planned.headline.startswith("The latency SLO, not memory, will be the limit: 3")
    assert any("estimate of the decode rate alone" in n for n in planned.notes)
    # The scheduler and memory bind in their turn.
    assert capacity_story(max_num_seqs=5, memory_planned=608, latency_predicted=40).binding.kind \
        == SCHEDULER  # fmt: skip
    memory = capacity_story(max_num_seqs=256, memory_planned=8, latency_predicted=40)
    assert memory.binding.kind == MEMORY
    assert memory.headline.startswith("Memory is the limit: 8 users at full context, planned")


def test_a_sweep_that_met_the_slo_everywhere_is_a_lower_bound():
    top = MeasuredLatency(8, 2.0, 10.0, 8, "job 1")
    story = capacity_story(max_num_seqs=256, memory_planned=80, latency_measured=top)
    assert _bound(story, LATENCY).at_least
    assert story.headline.startswith("At least 8 users: every level the benchmark tested met")
    # At the scheduler's own cap the scheduler, not the sweep's top, binds.
    capped = capacity_story(max_num_seqs=8, memory_planned=80, latency_measured=top)
    assert capped.binding.kind == SCHEDULER


@pytest.mark.parametrize("flag", ["client lag", "busy machine"])
def test_a_client_limited_answer_says_the_server_may_serve_more(flag):
    lagged = MeasuredLatency(2, 2.0, 10.0, 8, "job 1", client_limited=flag)
    story = capacity_story(max_num_seqs=16, memory_planned=80, latency_measured=lagged)
    assert any(f"flagged “{flag}”" in n and "may serve more" in n for n in story.notes)
    stale = MeasuredLatency(2, 2.0, 10.0, 8, "job 1", stale=True)
    notes = capacity_story(max_num_seqs=16, memory_planned=80, latency_measured=stale).notes
    assert any("recipe changed after that benchmark" in n for n in notes)


def test_an_unknown_architecture_has_no_answer():
    story = capacity_story(max_num_seqs=16, memory_planned=None, latency_predicted=None)
    assert story.binding.kind == SCHEDULER  # the one bound known
    nothing = capacity_story(max_num_seqs=16, memory_planned=None)
    assert _bound(nothing, MEMORY).users is None and _bound(nothing, LATENCY).users is None

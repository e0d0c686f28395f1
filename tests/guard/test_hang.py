"""apps.guard.hang: the hang detector, replayed without clocks or I/O."""

from __future__ import annotations

import pytest

from apps.guard.hang import ENGINE_DEAD, STALLED, UNHEALTHY, HangDetector, prefill_allowance_s
from sparkdomain.spark import PREFILL_TPS_FLOOR


def test_requests_running_and_no_token_for_the_stall_time_is_a_hang_once():
    dog = HangDetector(stall_s=60)
    seen = [dog.observe(float(t), running=2, generated=500 + min(t, 10) * 7, health_ok=True)
            for t in range(80)]  # fmt: skip
    hangs = [(t, h) for t, h in enumerate(seen) if h is not None]
    # the counter moved until t=10: stalled from then, reported at t=70, once
    assert [t for t, _ in hangs] == [70]
    hang = hangs[0][1]
    assert hang.kind == STALLED and hang.evidence["generation_tokens"] == 570
    assert "2 request(s) running and no token generated for 60 s" in hang.message


def test_an_idle_server_or_a_slow_one_is_not_hung():
    dog = HangDetector(stall_s=30)
    # idle: nothing running, the counter still
    assert not any(dog.observe(float(t), running=0, generated=100, health_ok=True)
                   for t in range(100))  # fmt: skip
    # slow: one token every 20 s while running
    assert not any(dog.observe(100.0 + t, running=1, generated=100 + t // 20, health_ok=True)
                   for t in range(200))  # fmt: skip


def test_a_new_episode_after_recovery_is_reported_again():
    dog = HangDetector(stall_s=10)
    first = [dog.observe(float(t), running=1, generated=5, health_ok=True) for t in range(12)]
    assert sum(h is not None for h in first) == 1
    assert dog.observe(12.0, running=1, generated=6, health_ok=True) is None  # it moved
    again = [dog.observe(13.0 + t, running=1, generated=6, health_ok=True) for t in range(12)]
    assert sum(h is not None for h in again) == 1


def test_the_engines_death_in_the_log_is_a_hang_at_once():
    dog = HangDetector()
    line = "ERROR 12-06 10:00:01 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client. EngineDeadError: EngineCore encountered an issue."
    hang = dog.observe(0.0, running=1, generated=10, health_ok=False, log_lines=["INFO x", line])
    assert hang is not None and hang.kind == ENGINE_DEAD and "EngineDeadError" in hang.message
    assert dog.observe(1.0, running=1, generated=10, health_ok=False, log_lines=[line]) is None


def test_health_failing_in_a_row_is_a_hang_one_failure_is_not():
    dog = HangDetector(health_fails=3)
    pattern = [False, True, False, False, True, False, False, False]
    found = [dog.observe(float(t), running=0, generated=1, health_ok=ok)
             for t, ok in enumerate(pattern)]  # fmt: skip
    assert [h.kind if h else None for h in found] == [None] * 7 + [UNHEALTHY]


def test_unreadable_metrics_never_count_as_a_stall():
    dog = HangDetector(stall_s=5)
    assert not any(dog.observe(float(t), running=None, generated=None, health_ok=True)
                   for t in range(50))  # fmt: skip


@pytest.mark.parametrize("kwargs", [{"stall_s": 0}, {"stall_s": -1}, {"health_fails": 0},
                                    {"health_fails": True}, {"stall_s": "60"},
                                    {"prefill_allowance_s": -1}])  # fmt: skip
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        HangDetector(**kwargs)


# --- a long prefill (docs/guard.md "A long prefill is not a hang") -----------------------
# What real vLLM V1 exports while a 100k-token prompt prefills (vllm/v1/core/sched/
# scheduler.py, v1/metrics/loggers.py): one request running, vllm:generation_tokens,
# vllm:prompt_tokens and the iteration-tokens histogram all flat until the step that gives
# it its first token; vllm:kv_cache_usage_perc growing after each chunk (its KV blocks are
# allocated chunk by chunk).


def _hangs(dog: HangDetector, samples) -> list[tuple[float, object]]:
    """Feed (t, kwargs) samples; the (t, Hang) of each hang reported."""
    seen = [(t, dog.observe(t, health_ok=True, **kw)) for t, kw in samples]
    return [(t, h) for t, h in seen if h is not None]


def _chunked_prefill(seconds: int, *, chunk_every: int = 4, generated: float = 500):
    """A chunked prefill: a new chunk's KV blocks every `chunk_every` s, no token."""
    return [(float(t), {"running": 1, "generated": generated, "prompt": 9000,
                        "kv_usage": 0.01 + 0.02 * (t // chunk_every)})
            for t in range(seconds)]  # fmt: skip


def test_a_long_chunked_prefill_is_not_a_hang_its_kv_cache_grows():
    # No prefill allowance at all: the KV cache growing chunk by chunk is the progress.
    dog = HangDetector(stall_s=10, prefill_allowance_s=0)
    samples = _chunked_prefill(60)
    # then its first token: the prompt counted whole, one token generated
    samples += [(60.0 + t, {"running": 1, "generated": 501 + t, "prompt": 109_000,
                            "kv_usage": 0.31}) for t in range(5)]  # fmt: skip
    assert _hangs(dog, samples) == []


def test_a_prefill_with_nothing_moving_has_the_longest_prompts_allowance():
    # One step prefills a whole prompt (no chunks): no metric moves until its first token.
    # 131,072 tokens at the floor rate: 655 s, however short the policy's stall time.
    allowance = prefill_allowance_s(131_072)
    assert allowance == pytest.approx(131_072 / PREFILL_TPS_FLOOR) == pytest.approx(655.36)
    dog = HangDetector(stall_s=10, prefill_allowance_s=allowance)
    flat = {"running": 1, "generated": 500, "prompt": 9000, "kv_usage": 0.05}
    samples = [(float(t), flat) for t in range(650)]
    samples.append((650.0, {**flat, "generated": 501, "prompt": 140_000, "kv_usage": 0.61}))
    assert _hangs(dog, samples) == []


def test_everything_flat_past_the_allowance_is_a_hang():
    dog = HangDetector(stall_s=10, prefill_allowance_s=prefill_allowance_s(131_072))
    flat = {"running": 1, "generated": 500, "prompt": 9000, "kv_usage": 0.05}
    hangs = _hangs(dog, [(float(t), flat) for t in range(800)])
    assert [t for t, _ in hangs] == [656.0]  # once, at the allowance (655.36 s)
    hang = hangs[0][1]
    assert hang.kind == STALLED
    assert hang.evidence["prefill_allowance_s"] == 655.4 and hang.evidence["stall_s"] == 10
    assert hang.evidence["kv_usage"] == 0.05 and hang.evidence["prompt_tokens"] == 9000
    assert "no token generated for 656 s" in hang.message
    assert "longer than the 655 s the longest prompt may take" in hang.message


def test_a_stall_after_the_prefill_is_a_hang_after_the_allowance_from_its_last_step():
    dog = HangDetector(stall_s=10, prefill_allowance_s=prefill_allowance_s(8192))  # 41 s
    samples = _chunked_prefill(30)  # the last chunk at t=28
    flat = {"running": 1, "generated": 500, "prompt": 9000, "kv_usage": samples[-1][1]["kv_usage"]}
    samples += [(30.0 + t, flat) for t in range(60)]
    assert [t for t, _ in _hangs(dog, samples)] == [69.0]  # 28 + 40.96


def test_any_counter_that_moves_is_progress_not_only_the_generated_tokens():
    # e.g. prefills finishing on a server that generates nothing itself (an embedding model)
    dog = HangDetector(stall_s=10)
    samples = [(float(t), {"running": 2, "generated": 0, "prompt": 1000 * (t // 5),
                           "kv_usage": 0.2}) for t in range(60)]  # fmt: skip
    assert _hangs(dog, samples) == []
    # and nothing moving at all, without an allowance, is a hang after the stall time
    dog = HangDetector(stall_s=10)
    flat = {"running": 2, "generated": 0, "prompt": 1000, "kv_usage": 0.2}
    assert [t for t, _ in _hangs(dog, [(float(t), flat) for t in range(30)])] == [10.0]


def test_prefill_progress_ends_an_episode():
    dog = HangDetector(stall_s=10)
    flat = {"running": 1, "generated": 5, "kv_usage": 0.1}
    assert len(_hangs(dog, [(float(t), flat) for t in range(15)])) == 1
    # the engine steps again (a chunk's blocks), then wedges anew: a second episode
    samples = [(15.0, {**flat, "kv_usage": 0.2})]
    samples += [(16.0 + t, {**flat, "kv_usage": 0.2}) for t in range(15)]
    assert [t for t, _ in _hangs(dog, samples)] == [25.0]


def test_the_allowance_follows_the_length_and_the_hosts_clock():
    assert prefill_allowance_s(8192) == pytest.approx(40.96)
    assert prefill_allowance_s(8192, time_scale=50) == pytest.approx(40.96 / 50)  # sparksim ×50
    assert prefill_allowance_s(None) == prefill_allowance_s(0) == 0.0

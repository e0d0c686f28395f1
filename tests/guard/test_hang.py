"""apps.guard.hang: the hang detector, replayed without clocks or I/O."""

from __future__ import annotations

import pytest

from apps.guard.hang import ENGINE_DEAD, STALLED, UNHEALTHY, HangDetector


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
                                    {"health_fails": True}, {"stall_s": "60"}])  # fmt: skip
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        HangDetector(**kwargs)

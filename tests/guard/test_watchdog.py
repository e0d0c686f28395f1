"""apps.guard.watchdog and apps.guard.hostmem: pure Python, no Django, no sleeps.

The watchdog is driven with explicit readings and times, including a memory curve taken
from sparksim's own model of the `mem-growth` fault, rendered as /proc/meminfo text and
read back with the panel's meminfo parser: the same chain the host agent runs.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from apps.guard.hostmem import (
    NVIDIA_SMI_TIMEOUT_S,
    GpuProcess,
    NvidiaSmiError,
    Psi,
    PsiLine,
    gpu_processes,
    parse_gpu_processes,
    parse_psi,
    read_psi,
)
from apps.guard.watchdog import (
    ACT,
    GIB,
    OK,
    WARN,
    Decision,
    Watchdog,
)
from sparkdomain.meminfo import MeminfoError, parse_meminfo
from sparksim.faults import parse_faults
from sparksim.memory import GB, MemoryModel, gb_per_min_to_bytes_per_s, meminfo_text

WARN_B = 8 * GIB
ACT_B = 3 * GIB


def feed(dog: Watchdog, readings, start: float = 0.0, step: float = 1.0) -> list[Decision]:
    return [dog.observe(v, start + i * step) for i, v in enumerate(readings)]


def gib(x: float) -> int:
    return int(x * GIB)


# --- construction ------------------------------------------------------------------------


def test_act_must_be_below_warn():
    with pytest.raises(ValueError, match=r"act_bytes .* must be below warn_bytes"):
        Watchdog(warn_bytes=3 * GIB, act_bytes=3 * GIB)
    with pytest.raises(ValueError, match="must be below"):
        Watchdog(warn_bytes=2 * GIB, act_bytes=3 * GIB)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"polls": 0},
        {"polls": True},
        {"clear_margin_bytes": -1},
        {"history_s": 0},
        {"history_s": float("nan")},
    ],
)
def test_bad_settings_are_refused(kwargs):
    with pytest.raises((ValueError, TypeError)):
        Watchdog(WARN_B, ACT_B, **kwargs)


def test_bad_readings_are_refused():
    dog = Watchdog(WARN_B, ACT_B)
    with pytest.raises(ValueError, match="at least 0"):
        dog.observe(-1, 0.0)
    with pytest.raises(TypeError):
        dog.observe(2.5 * GIB, 0.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        dog.observe(10 * GIB, float("nan"))
    dog.observe(10 * GIB, 5.0)
    with pytest.raises(ValueError, match="backwards"):
        dog.observe(10 * GIB, 4.0)


# --- consecutive-poll rules ----------------------------------------------------------------


def test_plenty_of_memory_is_ok():
    d = Watchdog(WARN_B, ACT_B).observe(50 * GIB, 0.0)
    assert (d.level, d.previous, d.changed, d.stop_run, d.unknown) == (OK, OK, False, False, False)
    assert d.available_bytes == 50 * GIB and d.at == 0.0
    assert "50.0 GiB" in d.message and "ok" in d.message


def test_one_low_reading_does_not_warn_two_do():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    first = dog.observe(gib(7.5), 0.0)
    assert first.level == OK and not first.changed
    assert "1 of 2 polls" in first.message
    second = dog.observe(gib(7.4), 1.0)
    assert (second.level, second.previous, second.changed) == (WARN, OK, True)
    assert not second.stop_run
    assert second.message == (
        "MemAvailable 7.4 GiB is below the 8.0 GiB warn threshold for 2 polls: warning"
    )


def test_an_interrupted_low_run_starts_counting_again():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    decisions = feed(dog, [gib(7), gib(9), gib(7), gib(9), gib(7)])
    assert [d.level for d in decisions] == [OK] * 5


def test_act_needs_consecutive_polls_and_stops_the_run():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    a = dog.observe(gib(2.4), 0.0)
    assert a.level == OK and not a.stop_run
    assert "act threshold (1 of 2 polls" in a.message
    b = dog.observe(gib(2.4), 1.0)
    assert (b.level, b.previous, b.changed, b.stop_run) == (ACT, OK, True, True)
    assert b.message == (
        "MemAvailable 2.4 GiB is below the 3.0 GiB act threshold for 2 polls: stopping the run"
    )


@pytest.mark.parametrize("polls", [1, 2, 3, 5])
def test_polls_setting_is_honoured(polls):
    dog = Watchdog(WARN_B, ACT_B, polls=polls)
    decisions = feed(dog, [gib(1)] * (polls + 3))
    first_stop = next(i for i, d in enumerate(decisions) if d.stop_run)
    assert first_stop == polls - 1
    assert all(d.level == OK for d in decisions[: polls - 1])


def test_warn_then_act():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    levels = [d.level for d in feed(dog, [gib(7), gib(6), gib(5), gib(2.9), gib(2.5), gib(2)])]
    assert levels == [OK, WARN, WARN, WARN, ACT, ACT]


# --- one stop per episode ------------------------------------------------------------------


def test_stop_run_once_per_episode_while_memory_stays_low():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    decisions = feed(dog, [gib(2)] * 30)
    assert sum(d.stop_run for d in decisions) == 1
    assert all(d.level == ACT for d in decisions[1:])
    assert "already told to stop" in decisions[-1].message


def test_a_new_episode_after_recovery_stops_again():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    low, high = [gib(2)] * 4, [gib(20)] * 3
    decisions = feed(dog, low + high + low)
    assert [i for i, d in enumerate(decisions) if d.stop_run] == [1, 8]
    assert decisions[5].level == OK and decisions[5].previous == ACT
    assert "back to ok" in decisions[5].message


def test_act_clears_to_warn_between_the_thresholds():
    dog = Watchdog(WARN_B, ACT_B, polls=2, clear_margin_bytes=GIB)
    decisions = feed(dog, [gib(2), gib(2), gib(5), gib(5), gib(5)])
    assert [d.level for d in decisions] == [OK, ACT, ACT, WARN, WARN]
    assert "down from act to warn" in decisions[3].message
    assert not any(d.stop_run for d in decisions[2:])


# --- hysteresis ----------------------------------------------------------------------------


def test_oscillating_around_warn_does_not_flap():
    dog = Watchdog(WARN_B, ACT_B, polls=2, clear_margin_bytes=GIB)
    feed(dog, [gib(7.5), gib(7.5)])  # into warn
    assert dog.level == WARN
    # Up to warn + 0.9 GiB and back down: never at warn + margin, so it stays warn.
    wobble = [gib(8.9), gib(7.8), gib(8.5), gib(7.9), gib(8.9), gib(8.9), gib(7.6)] * 5
    decisions = feed(dog, wobble, start=2.0)
    assert {d.level for d in decisions} == {WARN}
    assert not any(d.changed for d in decisions)
    assert "has not recovered" in decisions[0].message


def test_alternating_readings_never_enter_warn():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    decisions = feed(dog, [gib(7.9), gib(8.1)] * 20)
    assert {d.level for d in decisions} == {OK}


def test_oscillating_around_act_stops_once_and_does_not_flap():
    dog = Watchdog(WARN_B, ACT_B, polls=2, clear_margin_bytes=GIB)
    wobble = [gib(2.8), gib(2.9), gib(3.2), gib(2.9), gib(3.9), gib(2.7), gib(3.5)] * 6
    decisions = feed(dog, wobble)
    assert sum(d.stop_run for d in decisions) == 1
    assert sum(d.changed for d in decisions) == 1  # ok -> act, and no way back out
    assert decisions[-1].level == ACT


def test_leaving_warn_needs_consecutive_polls_above_the_margin():
    dog = Watchdog(WARN_B, ACT_B, polls=2, clear_margin_bytes=GIB)
    feed(dog, [gib(7), gib(7)])
    d1 = dog.observe(gib(9.5), 2.0)
    assert d1.level == WARN and "(1 so far)" in d1.message
    d2 = dog.observe(gib(8.5), 3.0)  # above warn, below warn + margin: run broken
    assert d2.level == WARN
    d3 = dog.observe(gib(9.0), 4.0)  # exactly warn + margin counts
    d4 = dog.observe(gib(9.0), 5.0)
    assert (d3.level, d4.level, d4.previous, d4.changed) == (WARN, OK, WARN, True)
    assert d4.message == "MemAvailable 9.0 GiB has been at or above 9.0 GiB for 2 polls: back to ok"


def test_zero_margin_still_needs_consecutive_polls():
    dog = Watchdog(WARN_B, ACT_B, polls=2, clear_margin_bytes=0)
    levels = [d.level for d in feed(dog, [gib(7), gib(7), gib(8), gib(7), gib(8), gib(8)])]
    assert levels == [OK, WARN, WARN, WARN, WARN, OK]


# --- unknown readings ----------------------------------------------------------------------


def test_unknown_reading_is_never_a_silent_ok():
    dog = Watchdog(WARN_B, ACT_B)
    d = dog.observe(None, 0.0, error="cannot read /proc/meminfo: Permission denied")
    assert d.unknown and d.level == OK and not d.changed and not d.stop_run
    assert d.available_bytes is None
    assert "unknown" in d.message and "Permission denied" in d.message
    assert "cannot tell how close the host is to freezing" in d.message
    d2 = dog.observe(None, 1.0)
    assert d2.unknown and "for 2 polls" in d2.message


def test_unknown_does_not_break_a_run_of_low_readings():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    decisions = feed(dog, [gib(2), None, gib(2)])
    assert [d.level for d in decisions] == [OK, OK, ACT]
    assert decisions[2].stop_run


def test_unknown_breaks_a_run_of_recovering_readings():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    feed(dog, [gib(2), gib(2)])
    decisions = feed(dog, [gib(20), None, gib(20), gib(20)], start=2.0)
    assert [d.level for d in decisions] == [ACT, ACT, ACT, OK]
    assert "already told to stop" in decisions[1].message


def test_unknown_while_in_act_does_not_stop_again_and_resumes():
    dog = Watchdog(WARN_B, ACT_B, polls=2)
    decisions = feed(dog, [gib(2), gib(2), None, None, gib(2), gib(2)])
    assert sum(d.stop_run for d in decisions) == 1
    assert [d.unknown for d in decisions] == [False, False, True, True, False, False]
    assert all(d.level == ACT for d in decisions[1:])


# --- history -------------------------------------------------------------------------------


def test_history_keeps_the_last_60_seconds_including_gaps():
    dog = Watchdog(WARN_B, ACT_B)
    for t in range(100):
        dog.observe(None if t == 95 else (100 - t) * GIB, float(t))
    history = dog.history()
    assert history[0] == (39.0, 61 * GIB)
    assert history[-1] == (99.0, 1 * GIB)
    assert len(history) == 61
    assert (95.0, None) in history
    history.clear()  # a copy: the caller cannot damage the watchdog's own curve
    assert len(dog.history()) == 61


def test_history_window_is_configurable():
    dog = Watchdog(WARN_B, ACT_B, history_s=5)
    feed(dog, [10 * GIB] * 20, step=0.5)
    assert [t for t, _ in dog.history()] == [4.5 + 0.5 * i for i in range(11)]


# --- the sparksim mem-growth fault, end to end ----------------------------------------------


@pytest.mark.parametrize("spec", ["mem-growth:2", "mem-growth:30", "mem-growth:60"])
def test_sparksim_memory_ramp_stops_the_run_at_the_second_poll_below_act(spec):
    """Memory creeps up at the fault's rate; the agent polls meminfo once a (simulated)
    second. The stop must come on the second consecutive reading below act, i.e. before
    MemAvailable has fallen more than one poll's worth of growth below the threshold, and
    long before the pool is exhausted (the freeze)."""
    faults = parse_faults([spec])
    rate = gb_per_min_to_bytes_per_s(faults.mem_growth_gb_per_min)  # bytes per second
    model = MemoryModel(growth_bytes_per_s=rate)
    model.set_footprint(110 * GB)  # a large model loaded: ~12 GB left to start with
    dog = Watchdog(warn_bytes=8 * GIB, act_bytes=3 * GIB, polls=2)

    decisions: list[Decision] = []
    t = 0
    while True:
        available = parse_meminfo(meminfo_text(model, float(t))).available_bytes
        decisions.append(dog.observe(available, float(t)))
        if available == 0 or len(decisions) > 10_000:
            break
        t += 1

    stops = [d for d in decisions if d.stop_run]
    assert len(stops) == 1, "exactly one stop for the whole ramp"
    stop = stops[0]
    below_act = [d for d in decisions if d.available_bytes < dog.act_bytes]
    # The second consecutive reading below act is the one that stops the run.
    assert stop is below_act[1]
    assert below_act[0].level != ACT
    # One poll after the first reading below act, which itself lies within one poll's
    # decline of the threshold: so at most two polls' worth of decline below act.
    assert stop.at == below_act[0].at + 1.0
    per_poll = rate * 1.0
    assert below_act[0].available_bytes >= dog.act_bytes - per_poll - 1024  # meminfo is in kB
    assert stop.available_bytes >= dog.act_bytes - 2 * per_poll - 1024
    assert stop.available_bytes > 0
    assert stop.message.endswith("for 2 polls: stopping the run")
    # Warn came first, on the second reading below warn.
    below_warn = [d for d in decisions if d.available_bytes < dog.warn_bytes]
    assert below_warn[1].changed and below_warn[1].level == WARN
    assert decisions[-1].level == ACT and not decisions[-1].stop_run


# --- trend prediction ----------------------------------------------------------------------


def _ramp(dog: Watchdog, model: MemoryModel, poll: float, horizon: float | None, **kw):
    """Poll the sparksim memory model every `poll` s until the watchdog stops the run (or
    memory runs out): the decisions."""
    decisions: list[Decision] = []
    t = 0.0
    while len(decisions) < 100_000:
        available = parse_meminfo(meminfo_text(model, t)).available_bytes
        decisions.append(dog.observe(available, t, horizon_s=horizon, **kw))
        if decisions[-1].stop_run or available == 0:
            break
        t += poll
    return decisions


@pytest.mark.parametrize("gb_per_s", [0.5, 2.0, 4.0])
def test_the_forecast_stops_a_fast_leak_a_poll_earlier_than_the_two_poll_rule(gb_per_s):
    """The two-poll rule lets a leak of R bytes/s fall up to 2 polls × R below the act line
    before it acts: at 0.5 s polls and 4 GB/s that is 4 GB below a 3 GB line — a frozen
    Spark. The forecast (below the warn line only) acts as soon as the next poll would be
    past the act line: before any reading crosses it when one lands between the lines,
    and at the latest on the first reading below it — a whole poll's fall higher."""
    poll, rate = 0.5, gb_per_s * 1e9
    stops, first_below = {}, {}
    for horizon in (None, poll):
        model = MemoryModel(growth_bytes_per_s=rate)
        model.set_footprint(110 * GB)
        dog = Watchdog(warn_bytes=4 * GB, act_bytes=3 * GB)
        decisions = _ramp(dog, model, poll, horizon)
        (stops[horizon],) = [d for d in decisions if d.stop_run]
        first_below[horizon] = next((d for d in decisions if d.available_bytes < 3 * GB), None)
    old, new = stops[None], stops[poll]
    assert not old.predicted and old.at == first_below[None].at + poll  # the second below
    assert new.predicted and new.at < old.at
    assert first_below[poll] is None or new.at <= first_below[poll].at
    assert new.available_bytes >= old.available_bytes + poll * rate - 1024  # meminfo is in kB
    assert new.eta_s is not None and new.eta_s <= poll
    assert new.fall_bytes_s == pytest.approx(rate, rel=0.01)
    assert "falling" in new.message and "act threshold in" in new.message
    if gb_per_s == 0.5:  # 0.25 GB a poll: readings land between the lines
        assert new.available_bytes >= 3 * GB and first_below[poll] is None
    if gb_per_s >= 2:  # too fast for the old rule: it read 1 GB and more below the line
        assert old.available_bytes <= 3 * GB - 1e9


def test_a_fast_healthy_start_above_the_warn_line_never_trips_the_forecast():
    """A planned run ends above the warn line; its start falls fast (weights, then the KV
    cache at once) and stops there: no forecast stop, however steep."""
    dog = Watchdog(warn_bytes=4 * GB, act_bytes=3 * GB)
    readings = [int((120 - 20 * i) * 1e9) for i in range(6)] + [int(4.4e9)] * 10
    decisions = [dog.observe(v, i * 0.1, horizon_s=0.1) for i, v in enumerate(readings)]
    assert not any(d.stop_run or d.predicted for d in decisions)
    assert decisions[5].fall_bytes_s == pytest.approx(200e9)  # it did see the fall


def test_a_steady_run_and_noise_never_trip_the_forecast():
    dog = Watchdog(warn_bytes=4 * GB, act_bytes=3 * GB)
    # Steady at 3.3 GB (under warn, just above act), wobbling ±200 MB around it.
    wobble = [0, -200, 150, -100, 200, -150, 50, -200, 100, 0] * 20
    decisions = [
        dog.observe(int(3.3e9 + w * 1e6), i * 0.5, horizon_s=0.5) for i, w in enumerate(wobble)
    ]
    assert not any(d.stop_run or d.predicted for d in decisions)
    assert dog.level == WARN


def test_a_slow_fall_gets_an_eta_but_is_left_to_the_readings():
    dog = Watchdog(warn_bytes=4 * GB, act_bytes=3 * GB)
    readings = [int(10e9 - i * 50e6) for i in range(10)]  # 100 MB/s, 7.5 GB above act
    decisions = [dog.observe(v, i * 0.5, horizon_s=0.5) for i, v in enumerate(readings)]
    assert decisions[0].eta_s is None and decisions[1].eta_s is None  # too few readings
    last = decisions[-1]
    assert not last.predicted and last.level == OK
    assert last.fall_bytes_s == pytest.approx(100e6)
    assert last.eta_s == pytest.approx((readings[-1] - 3e9) / 100e6)


def test_memory_pressure_doubles_the_horizon():
    def run(pressure: float | None) -> Decision:
        dog = Watchdog(warn_bytes=4 * GB, act_bytes=3 * GB)
        # Falling 1 GB/s; the last reading 0.8 GB above act: 0.8 s to the line.
        readings = [int(3.8e9 + (4 - i) * 0.5e9) for i in range(5)]
        return [
            dog.observe(v, i * 0.5, horizon_s=0.5, pressure_pct=pressure)
            for i, v in enumerate(readings)
        ][-1]

    assert not run(None).predicted and not run(5.0).predicted  # 0.8 s > 0.5 s
    under = run(25.0)  # 0.8 s ≤ 2 × 0.5 s
    assert under.predicted and under.stop_run and "memory pressure at 25 %" in under.message


def test_without_a_horizon_the_watchdog_only_acts_on_readings():
    dog = Watchdog(warn_bytes=4 * GB, act_bytes=3 * GB)
    readings = [int(6e9 - i * 1e9) for i in range(4)]  # 6, 5, 4, 3.0 GB: right at the line
    decisions = [dog.observe(v, float(i)) for i, v in enumerate(readings)]
    assert not any(d.stop_run for d in decisions)
    assert decisions[-1].eta_s == 0.0  # but it says where the trend is


def test_after_a_forecast_stop_the_episode_is_one_stop_and_clears_as_usual():
    dog = Watchdog(warn_bytes=4 * GB, act_bytes=3 * GB)
    # 6.0, 5.2, 4.4, 3.6 GB at 1.6 GB/s: 0.875 s to the line at 4.4, 0.375 s at 3.6.
    falling = [int(6e9 - i * 0.8e9) for i in range(4)]
    decisions = [dog.observe(v, i * 0.5, horizon_s=0.5) for i, v in enumerate(falling)]
    assert [d.stop_run for d in decisions] == [False, False, False, True]
    assert decisions[-1].level == ACT and decisions[-1].predicted
    # The run was killed: memory comes back; the level leaves act after 2 polls above the
    # margin, and no second stop happens while it does.
    after = [dog.observe(int(9e9), 2.0 + i * 0.5, horizon_s=0.5) for i in range(3)]
    assert not any(d.stop_run for d in after)
    assert [d.level for d in after] == [ACT, OK, OK]


@pytest.mark.parametrize("horizon", [-1.0, float("nan"), float("inf"), True, "0.5"])
def test_a_bad_horizon_is_refused(horizon):
    with pytest.raises(ValueError, match="horizon_s"):
        Watchdog(warn_bytes=4 * GB, act_bytes=3 * GB).observe(5 * GB, 0.0, horizon_s=horizon)


# --- PSI -----------------------------------------------------------------------------------

PSI_TEXT = (
    "some avg10=1.53 avg60=0.87 avg300=0.25 total=3571294\n"
    "full avg10=0.61 avg60=0.30 avg300=0.08 total=1293015\n"
)


def test_parse_psi_real_format():
    psi = parse_psi(PSI_TEXT)
    assert psi == Psi(
        some=PsiLine(avg10=1.53, avg60=0.87, avg300=0.25, total_us=3571294),
        full=PsiLine(avg10=0.61, avg60=0.30, avg300=0.08, total_us=1293015),
    )


def test_parse_psi_without_full_line():
    psi = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert psi.full is None and psi.some.total_us == 0


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no 'some' line"),
        ("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "no 'some' line"),
        ("some avg10=0.00 avg60=0.00 total=0\n", "no avg300"),
        ("some avg10=abc avg60=0.00 avg300=0.00 total=0\n", "malformed number"),
        ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1.5\n", "malformed number"),
        ("some avg10=nan avg60=0.00 avg300=0.00 total=0\n", "out of range"),
        ("some avg10=0.00 avg60 avg300=0.00 total=0\n", "malformed pressure line"),
        ("half avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "expected 'some' or 'full'"),
        ("MemTotal:       131072000 kB\n", "expected 'some' or 'full'"),
        (PSI_TEXT + PSI_TEXT, "two 'some' lines"),
    ],
)
def test_parse_psi_malformed(text, match):
    with pytest.raises(MeminfoError, match=match):
        parse_psi(text)


def test_read_psi_file(tmp_path: Path):
    path = tmp_path / "memory"
    path.write_text(PSI_TEXT)
    assert read_psi(path) == parse_psi(PSI_TEXT)
    assert read_psi(tmp_path / "absent") is None
    path.write_text("garbage\n")
    with pytest.raises(MeminfoError, match=re.escape(str(path))):
        read_psi(path)
    with pytest.raises(MeminfoError, match="cannot read"):
        read_psi(tmp_path)  # a directory: exists but cannot be read as a file


@pytest.mark.skipif(not Path("/proc/pressure/memory").exists(), reason="this kernel has no PSI")
def test_read_psi_from_this_kernel():
    psi = read_psi()
    assert psi is not None
    assert psi.full is not None  # the memory file has both lines
    for line in (psi.some, psi.full):
        assert 0.0 <= line.avg10 <= 100.0 and line.total_us >= 0
    assert psi.full.total_us <= psi.some.total_us


# --- nvidia-smi ----------------------------------------------------------------------------

SMI_PATH = "/usr/bin/nvidia-smi"


def has_smi(name: str) -> str | None:
    assert name == "nvidia-smi"
    return SMI_PATH


class FakeRun:
    """Stands in for subprocess.run; nvidia-smi cannot exist on the test machine."""

    def __init__(self, stdout: str = "", returncode: int = 0, stderr: str = "", exc=None):
        self.result = subprocess.CompletedProcess([], returncode, stdout, stderr)
        self.exc = exc
        self.calls: list[tuple[object, dict]] = []

    def __call__(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        if self.exc is not None:
            raise self.exc
        return self.result


def test_gpu_processes_without_nvidia_smi_is_none():
    run = FakeRun()
    assert gpu_processes(run, which=lambda name: None) is None
    assert run.calls == []


def test_gpu_processes_parses_rows_and_unknown_memory():
    run = FakeRun(
        "4127, /usr/bin/python3, 98304\n"
        "5120, VLLM::EngineCore, [N/A]\n"
        "6001, ollama, Not Supported\n"
        "7002, /opt/app, with comma, 512\n"
    )
    procs = gpu_processes(run, which=has_smi)
    assert procs == [
        GpuProcess(4127, "/usr/bin/python3", 98304),
        GpuProcess(5120, "VLLM::EngineCore", None),
        GpuProcess(6001, "ollama", None),
        GpuProcess(7002, "/opt/app, with comma", 512),
    ]
    assert procs[0].used_bytes == 98304 * 2**20
    assert procs[1].used_bytes is None  # unknown, not zero
    (argv, kwargs) = run.calls[0]
    assert isinstance(argv, list), "an argument list, never a shell string"
    assert argv == [
        SMI_PATH,
        "--query-compute-apps=pid,process_name,used_memory",
        "--format=csv,noheader,nounits",
    ]
    assert kwargs["timeout"] == NVIDIA_SMI_TIMEOUT_S == 5.0
    assert kwargs.get("shell", False) is False
    assert kwargs["capture_output"] and kwargs["text"]


def test_gpu_processes_with_no_processes_is_empty():
    assert gpu_processes(FakeRun(""), which=has_smi) == []
    assert parse_gpu_processes("No running processes found\n") == []


def test_gpu_processes_nonzero_exit_is_an_error():
    run = FakeRun(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        returncode=9,
    )
    with pytest.raises(NvidiaSmiError, match="status 9: NVIDIA-SMI has failed"):
        gpu_processes(run, which=has_smi)


def test_gpu_processes_timeout_and_os_errors():
    timeout = FakeRun(exc=subprocess.TimeoutExpired(["nvidia-smi"], 5.0))
    with pytest.raises(NvidiaSmiError, match="did not answer within 5 s"):
        gpu_processes(timeout, which=has_smi)
    gone = FakeRun(exc=FileNotFoundError(2, "No such file or directory"))
    with pytest.raises(NvidiaSmiError, match=r"cannot run .*No such file"):
        gpu_processes(gone, which=has_smi)


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ("4127, python3\n", "expected 'pid, process_name, used_memory'"),
        ("abc, python3, 100\n", "unexpected pid"),
        ("4127, python3, lots\n", "unexpected used_memory"),
        ("4127, python3, -5\n", "negative used_memory"),
    ],
)
def test_gpu_processes_malformed_rows(row, match):
    with pytest.raises(NvidiaSmiError, match=match):
        gpu_processes(FakeRun(row), which=has_smi)


def test_hostmem_watchdog_and_hang_import_no_django():
    import subprocess as sp
    import sys

    code = (
        "import sys, apps.guard.hostmem, apps.guard.watchdog, apps.guard.hang; "
        "sys.exit(1 if any(m == 'django' or m.startswith('django.') for m in sys.modules) else 0)"
    )
    root = Path(__file__).resolve().parents[2]
    result = sp.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr or "django was imported"

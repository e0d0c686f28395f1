"""sparksim.memory: the unified-memory model and the /proc/meminfo look-alike it writes.

The panel's host agent reads this file instead of the real one, so the tests read it the
way a reader does: with a small independent parser, checked against the real kernel
file where one exists.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import stat
import threading
from pathlib import Path

import pytest

from sparksim.memory import (
    GB,
    MeminfoWriter,
    MemoryModel,
    gb_per_min_to_bytes_per_s,
    meminfo_text,
)
from tests.conftest import run_async

LINE = re.compile(r"^([A-Za-z0-9_()]+):( +)(\d+)( kB)?$")
REQUIRED = [
    "MemTotal",
    "MemFree",
    "MemAvailable",
    "Buffers",
    "Cached",
    "SwapCached",
    "Active",
    "Inactive",
    "SwapTotal",
    "SwapFree",
    "Dirty",
    "Shmem",
]


def parse_meminfo(text: str) -> dict[str, int]:
    """A strict reader: every line must be `Name:   value [kB]`; values as printed (kB)."""
    assert text.endswith("\n")
    values: dict[str, int] = {}
    for line in text.splitlines():
        match = LINE.match(line)
        assert match, f"not a meminfo line: {line!r}"
        name, _, value, _ = match.groups()
        assert name not in values, f"{name} twice"
        values[name] = int(value)
    return values


def value_column(line: str) -> int:
    """Where the value ends: the kernel right-aligns values (up to 8 digits) at column 24."""
    match = LINE.match(line)
    assert match
    return match.end(3)


def spark(footprint_gb: float = 0, growth_gb_per_min: float = 0) -> MemoryModel:
    model = MemoryModel(growth_bytes_per_s=gb_per_min_to_bytes_per_s(growth_gb_per_min))
    model.set_footprint(int(footprint_gb * GB))
    return model


# --- MemoryModel ---------------------------------------------------------------------


def test_model_defaults_are_a_spark() -> None:
    model = MemoryModel()
    assert model.physical_bytes == 128 * GB
    assert model.os_bytes == 6 * GB
    assert model.used_bytes(0) == 6 * GB
    assert model.available_bytes(0) == 122 * GB


def test_footprint_and_growth_add_up() -> None:
    model = spark(footprint_gb=100, growth_gb_per_min=2)
    assert model.used_bytes(0) == 106 * GB
    assert model.used_bytes(60) == 108 * GB
    assert model.used_bytes(90) == 109 * GB
    assert model.available_bytes(90) == 19 * GB
    # Time before the start counts as no time: no negative growth.
    assert model.used_bytes(-30) == 106 * GB


def test_used_is_capped_at_physical() -> None:
    model = spark(footprint_gb=100, growth_gb_per_min=2)
    # 22 GB free at t=0, 2 GB/min: the pool is exhausted after 11 simulated minutes.
    assert model.available_bytes(11 * 60 - 1) > 0
    assert model.used_bytes(11 * 60) == 128 * GB
    assert model.used_bytes(3600) == 128 * GB
    assert model.available_bytes(3600) == 0
    model.set_footprint(500 * GB)
    assert model.used_bytes(0) == 128 * GB


def test_negative_footprint_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        MemoryModel().set_footprint(-1)


def test_growth_conversion() -> None:
    assert gb_per_min_to_bytes_per_s(6) == 0.1 * GB


# --- meminfo_text --------------------------------------------------------------------


def test_meminfo_has_the_panels_numbers() -> None:
    model = spark(footprint_gb=100)
    info = parse_meminfo(meminfo_text(model, 0))
    for name in REQUIRED:
        assert name in info
    assert list(info)[:3] == ["MemTotal", "MemFree", "MemAvailable"]
    assert info["MemTotal"] == 128e9 / 1024 == 125_000_000
    assert info["MemAvailable"] == (128 - 106) * GB // 1024
    assert info["SwapTotal"] == info["SwapFree"] == info["SwapCached"] == 0


def test_memfree_is_slightly_below_memavailable() -> None:
    for footprint in (0, 60, 100, 120):
        info = parse_meminfo(meminfo_text(spark(footprint_gb=footprint), 0))
        cache_kb = info["MemAvailable"] - info["MemFree"]
        assert 0 < cache_kb <= 3.2 * GB / 1024
        # The cache is what separates the two (± kB rounding of three numbers).
        assert abs(info["Buffers"] + info["Cached"] - info["Shmem"] - cache_kb) <= 2


def test_meminfo_uses_the_kernels_spacing() -> None:
    text = meminfo_text(spark(footprint_gb=100), 0)
    assert text.startswith("MemTotal:       125000000 kB\n")
    assert "SwapTotal:             0 kB\n" in text
    assert "HugePages_Total:       0\n" in text
    for line in text.splitlines():
        value = LINE.match(line).group(3)  # type: ignore[union-attr]
        # Labels pad to 16 columns; values up to 8 digits end at column 24, longer ones
        # push the unit right, exactly as the kernel's seq_put_decimal_ull_width does.
        assert value_column(line) == 16 + max(8, len(value))


def test_our_layout_matches_the_real_proc_meminfo() -> None:
    real = Path("/proc/meminfo")
    if not real.exists():
        pytest.skip("no /proc/meminfo on this machine")
    real_text = real.read_text()
    real_info = parse_meminfo(real_text)  # the test's parser must read the real thing
    ours = meminfo_text(spark(footprint_gb=100), 0)
    real_lines = {LINE.match(line).group(1): line for line in real_text.splitlines()}  # type: ignore[union-attr]
    for line in ours.splitlines():
        name = LINE.match(line).group(1)  # type: ignore[union-attr]
        assert name in real_info, f"{name} is not a real meminfo field"
        real_line = real_lines[name]
        assert line[:16] == real_line[:16], (line, real_line)  # the padded label
        ours_digits = len(LINE.match(line).group(3))  # type: ignore[union-attr]
        real_digits = len(LINE.match(real_line).group(3))  # type: ignore[union-attr]
        if max(ours_digits, real_digits) <= 8:
            assert value_column(line) == value_column(real_line), (line, real_line)
        assert line.endswith(" kB") == real_line.endswith(" kB"), name


def test_memavailable_falls_with_growth() -> None:
    model = spark(footprint_gb=100, growth_gb_per_min=2)
    available = [
        parse_meminfo(meminfo_text(model, minute * 60))["MemAvailable"] for minute in range(11)
    ]
    steps = [a - b for a, b in itertools.pairwise(available)]
    assert all(abs(step - 2 * GB / 1024) <= 1 for step in steps), steps
    assert available[0] == 22 * GB // 1024


def test_meminfo_when_the_pool_is_exhausted() -> None:
    info = parse_meminfo(meminfo_text(spark(footprint_gb=100, growth_gb_per_min=2), 3600))
    assert info["MemTotal"] == 125_000_000
    assert info["MemAvailable"] == 0
    assert info["MemFree"] == 0
    assert info["Buffers"] == 0
    assert all(value >= 0 for value in info.values())


# --- MeminfoWriter -------------------------------------------------------------------


def test_write_once(tmp_path: Path) -> None:
    target = tmp_path / "meminfo"
    model = spark(footprint_gb=100)
    MeminfoWriter(target, model, clock=lambda: 0.0).write_once()
    assert parse_meminfo(target.read_text())["MemAvailable"] == 22 * GB // 1024
    # World-readable, like the real file: the host agent may run as another user.
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["meminfo"]  # no temp file left behind
    previous = os.umask(0o077)  # make run's: its var/ is the user's alone
    try:
        MeminfoWriter(target, model, clock=lambda: 0.0).write_once()
    finally:
        os.umask(previous)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600

    model.set_footprint(110 * GB)  # the next phase of start-up
    MeminfoWriter(str(target), model, clock=lambda: 0.0).write_once()
    assert parse_meminfo(target.read_text())["MemAvailable"] == 12 * GB // 1024


def test_writes_are_atomic_for_a_concurrent_reader(tmp_path: Path) -> None:
    target = tmp_path / "meminfo"
    model = spark(footprint_gb=100, growth_gb_per_min=2)
    ticks = itertools.count()
    writer = MeminfoWriter(target, model, clock=lambda: float(next(ticks)))
    writer.write_once()
    done = threading.Event()

    def write_many() -> None:
        try:
            for _ in range(1500):
                writer.write_once()
        finally:
            done.set()

    thread = threading.Thread(target=write_many)
    thread.start()
    reads: list[int] = []
    try:
        # Read for as long as the writer writes: an in-place rewrite (truncate, then
        # write) would show the reader an empty or half-written file here.
        while not done.is_set() or not reads:
            info = parse_meminfo(target.read_text())
            assert info["MemTotal"] == 125_000_000
            reads.append(info["MemAvailable"])
    finally:
        thread.join(timeout=60)
    assert len(reads) > 10
    assert reads == sorted(reads, reverse=True)  # growth only ever lowers it
    assert os.listdir(tmp_path) == ["meminfo"]


def test_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="interval_s must be greater than 0"):
        MeminfoWriter(tmp_path / "meminfo", MemoryModel(), clock=lambda: 0.0, interval_s=0)


def test_run_writes_until_cancelled(tmp_path: Path) -> None:
    target = tmp_path / "meminfo"
    calls: list[float] = []

    def clock() -> float:
        calls.append(len(calls) * 60.0)
        return calls[-1]

    writer = MeminfoWriter(
        target, spark(footprint_gb=100, growth_gb_per_min=2), clock=clock, interval_s=0.01
    )

    async def scenario() -> asyncio.Task[None]:
        task = asyncio.create_task(writer.run())
        async with asyncio.timeout(10):
            while len(calls) < 3:
                await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task

    task = run_async(scenario())
    assert task.cancelled()
    written = len(calls)
    # The file holds the numbers of the last write: growth of (written − 1) minutes.
    info = parse_meminfo(target.read_text())
    assert info["MemAvailable"] == (22 - 2 * (written - 1)) * GB // 1024


def test_run_logs_errors_once_and_keeps_going(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sparksim.memory")
    target = tmp_path / "not-yet" / "meminfo"
    calls: list[float] = []

    def clock() -> float:
        calls.append(0.0)
        return 0.0

    writer = MeminfoWriter(target, spark(footprint_gb=100), clock=clock, interval_s=0.01)

    async def scenario() -> None:
        task = asyncio.create_task(writer.run())
        try:
            async with asyncio.timeout(10):
                while len(calls) < 5:  # five failed writes: the directory does not exist
                    await asyncio.sleep(0.005)
                assert not task.done()  # failing writes did not end the loop
                target.parent.mkdir()
                while not target.exists():
                    await asyncio.sleep(0.005)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    run_async(scenario())
    records = [r for r in caplog.records if r.name == "sparksim.memory"]
    errors = [r for r in records if r.levelno == logging.ERROR]
    # Many failed writes, one log line: a missing directory must not flood the log.
    assert len(errors) == 1
    assert "could not write" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert errors[0].exc_info[0] is FileNotFoundError
    assert [r.getMessage() for r in records if r.levelno == logging.INFO] == [
        f"writing {target} again"
    ]
    assert parse_meminfo(target.read_text())["MemTotal"] == 125_000_000

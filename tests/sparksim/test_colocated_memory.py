"""Several sparksim servers on one simulated Spark share its memory (sparksim/memory.py
`HostFootprints`): each publishes its own footprint beside the meminfo file they are all
given, every file any of them writes shows the OS plus the sum over the live ones, a
server killed with SIGKILL stops counting, and vLLM's start gate sees the others' memory
as in use, while each server's KV cache stays its own utilization's."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sparkdomain.spark import GB, GIB
from sparksim.arguments import vllm_args
from sparksim.facts import host_spec
from sparksim.memory import (
    FOOTPRINTS_SUFFIX,
    HostFootprints,
    MeminfoWriter,
    MemoryModel,
    gb_per_min_to_bytes_per_s,
    meminfo_text,
)
from sparksim.profiles import resolve_profile
from sparksim.startup import memory_plan
from sparksim.vllm_errors import VllmErrors
from tests.conftest import ROOT, wait_for
from tests.model_configs import QWEN3_SMALL, hf_cache
from tests.sparksim.conftest import NEMOTRON

PHYSICAL, OS = 128 * GB, 6 * GB


def available_kb(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise AssertionError(f"no MemAvailable in {path}")


def spark(footprint_gb: float = 0, growth_gb_per_min: float = 0) -> MemoryModel:
    model = MemoryModel(physical_bytes=PHYSICAL, os_bytes=OS,
                        growth_bytes_per_s=gb_per_min_to_bytes_per_s(growth_gb_per_min))  # fmt: skip
    model.set_footprint(int(footprint_gb * GB))
    return model


def footprint_files(meminfo: Path) -> list[str]:
    folder = Path(f"{meminfo}{FOOTPRINTS_SUFFIX}")
    return sorted(n for n in os.listdir(folder) if not n.startswith(".") and "." not in n)


# --- the shared file, in one process ---------------------------------------------------


def test_one_server_alone_writes_exactly_what_an_unshared_writer_writes(tmp_path):
    target = tmp_path / "meminfo"
    model = spark(footprint_gb=100, growth_gb_per_min=2)
    MeminfoWriter(target, model, clock=lambda: 120.0, shared=True).write_once()
    assert target.read_text() == meminfo_text(model, 120.0)
    assert len(footprint_files(target)) == 1  # its own footprint, beside the file


def test_two_servers_on_one_file_show_the_sum_and_each_gives_its_memory_back(tmp_path):
    target = tmp_path / "meminfo"
    first, second = spark(footprint_gb=40), spark(footprint_gb=30, growth_gb_per_min=6)
    a = MeminfoWriter(target, first, clock=lambda: 0.0, shared=True)
    b = MeminfoWriter(target, second, clock=lambda: 60.0, shared=True)  # 6 GB leaked so far
    a.write_once()
    assert available_kb(target) == (PHYSICAL - OS - 40 * GB) // 1024
    b.write_once()
    assert available_kb(target) == (PHYSICAL - OS - 76 * GB) // 1024
    a.write_once()  # whoever writes, the file shows both
    assert available_kb(target) == (PHYSICAL - OS - 76 * GB) // 1024
    assert a.others_bytes() == 36 * GB and b.others_bytes() == 40 * GB
    assert len(footprint_files(target)) == 2

    b.release()  # a clean stop: its footprint goes, and its last write says so
    assert available_kb(target) == (PHYSICAL - OS - 40 * GB) // 1024
    assert a.others_bytes() == 0
    a.release()  # the last one: the host agent, reading with no server left, sees it free
    assert available_kb(target) == (PHYSICAL - OS) // 1024
    assert footprint_files(target) == []


def test_the_sum_is_capped_at_physical_memory(tmp_path):
    target = tmp_path / "meminfo"
    a = MeminfoWriter(target, spark(footprint_gb=70), clock=lambda: 0.0, shared=True)
    b = MeminfoWriter(target, spark(footprint_gb=70), clock=lambda: 0.0, shared=True)
    a.write_once()
    b.write_once()
    assert available_kb(target) == 0  # a Spark freezes; it never shows more than it has


def test_a_killed_servers_footprint_is_ignored_and_removed(tmp_path):
    """SIGKILL leaves no chance to clean up: the kernel drops the dead server's lock, and
    the next write by anyone deletes its files (a temp file it left mid-write too)."""
    target = tmp_path / "meminfo"
    script = textwrap.dedent(f"""
        import sys, time
        from sparksim.memory import HostFootprints
        footprints = HostFootprints({str(target)!r})
        footprints.publish(25 * 10**9)
        print(footprints.id, flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        dead_id = proc.stdout.readline().strip()
        assert dead_id.startswith(f"{proc.pid}-")
        writer = MeminfoWriter(target, spark(footprint_gb=10), clock=lambda: 0.0, shared=True)
        writer.write_once()
        assert available_kb(target) == (PHYSICAL - OS - 35 * GB) // 1024  # it lives: counted
        assert writer.others_bytes() == 25 * GB
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
    folder = Path(f"{target}{FOOTPRINTS_SUFFIX}")
    (folder / f".{dead_id}.abcd1234.tmp").write_text("9")  # killed mid-write
    assert dead_id in footprint_files(target)
    writer.write_once()
    assert available_kb(target) == (PHYSICAL - OS - 10 * GB) // 1024
    assert footprint_files(target) == [writer.footprints.id]
    assert not any(name.startswith((dead_id, f".{dead_id}")) for name in os.listdir(folder))


def test_footprints_of_one_process_do_not_collide(tmp_path):
    """Ids are unique even where every server is pid 1 of its own container."""
    first, second = HostFootprints(tmp_path / "meminfo"), HostFootprints(tmp_path / "meminfo")
    assert first.id != second.id
    first.publish(3 * GB)
    second.publish(4 * GB)
    assert first.live() == {first.id: 3 * GB, second.id: 4 * GB}
    assert (first.others(), second.others()) == (4 * GB, 3 * GB)
    second.withdraw()
    assert first.live() == {first.id: 3 * GB}


def test_two_servers_stopping_at_once_leave_the_host_free(tmp_path):
    """Adding up and replacing happen under the host's lock: whichever stop writes last
    saw the other's footprint gone."""
    target = tmp_path / "meminfo"
    for _ in range(30):
        writers = [MeminfoWriter(target, spark(footprint_gb=20), clock=lambda: 0.0, shared=True)
                   for _ in range(2)]  # fmt: skip
        for writer in writers:
            writer.write_once()
        assert available_kb(target) == (PHYSICAL - OS - 40 * GB) // 1024
        threads = [threading.Thread(target=writer.release) for writer in writers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert available_kb(target) == (PHYSICAL - OS) // 1024


def test_a_stuck_holder_of_the_host_lock_does_not_stop_the_writes(tmp_path):
    target = tmp_path / "meminfo"
    writer = MeminfoWriter(target, spark(footprint_gb=20), clock=lambda: 0.0, shared=True)
    writer.write_once()
    fd = os.open(Path(f"{target}{FOOTPRINTS_SUFFIX}") / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another server, frozen with the lock held
        writer.model.set_footprint(30 * GB)
        started = time.monotonic()
        writer.write_once()
        assert time.monotonic() - started < 2
        assert available_kb(target) == (PHYSICAL - OS - 30 * GB) // 1024
    finally:
        os.close(fd)


def test_the_others_lower_only_the_free_memory_at_start_not_the_kv_cache():
    args = vllm_args([NEMOTRON, "--gpu-memory-utilization", "0.85", "--max-model-len", "131072",
                      "--max-num-seqs", "4"])  # fmt: skip
    profile = resolve_profile(NEMOTRON)
    alone = memory_plan(profile, args)
    beside = memory_plan(profile, args, others_bytes=30 * GB)
    assert beside.free_at_start == alone.free_at_start - 30 * GB
    assert dataclasses.replace(beside, free_at_start=alone.free_at_start) == alone


# --- real servers on one meminfo file --------------------------------------------------


@pytest.fixture
def qwen_cache(tmp_path) -> dict[str, str]:
    return hf_cache(tmp_path / "hub", "Qwen/Qwen3-0.6B", QWEN3_SMALL, 1_202_590_842)


def test_servers_side_by_side_share_the_host_and_a_third_is_refused_as_vllm_refuses_it(
    start_sim, tmp_path, qwen_cache
):
    host = host_spec()
    physical, os_bytes = int(host.physical_memory_gb * GB), int(host.os_reserve_gb * GB)
    total = host.cuda_visible_gib * GIB

    def pool(utilization: float) -> int:  # a ready server's footprint: its whole pool
        return int(utilization * total)

    def shows(*utilizations: float) -> bool:
        used = os_bytes + sum(pool(u) for u in utilizations)
        return available_kb(meminfo) == (physical - used) // 1024

    meminfo = tmp_path / "spark" / "meminfo"
    common = ("--meminfo-file", str(meminfo), "--max-model-len", "8192")

    def start(utilization: float, **kwargs):
        return start_sim("--gpu-memory-utilization", str(utilization), *common,
                         model="Qwen/Qwen3-0.6B", env=qwen_cache, time_scale=50, **kwargs)  # fmt: skip

    first = start(0.3)
    wait_for(lambda: shows(0.3), 10, "the first server's pool in meminfo")

    second = start(0.4)  # 119 − 39.2 GB free: its 52.3 GB pool fits beside the first
    wait_for(lambda: shows(0.3, 0.4), 10, "both servers' pools in meminfo")
    log = second.log()
    assert f"other servers on this host hold {pool(0.3) / GB:.2f} GB at start-up" in log
    tokens = first.log().split("GPU KV cache size: ")[1].split(" tokens")[0]
    alone = start_sim("--gpu-memory-utilization", "0.4", "--max-model-len", "8192",
                      model="Qwen/Qwen3-0.6B", env=qwen_cache, time_scale=50)  # fmt: skip
    # The others only matter to the gate: its KV cache is what it would be alone.
    assert (log.split("GPU KV cache size: ")[1].split(" tokens")[0]
            == alone.log().split("GPU KV cache size: ")[1].split(" tokens")[0] != tokens)  # fmt: skip
    alone.stop()

    third = start(0.5, ready=False)  # 27.5 GB free now: its 65.3 GB pool does not fit
    assert third.proc.wait(timeout=60) == 1
    version = log.split("vLLM server version ")[1].split(",")[0]
    free = (host.physical_memory_gb - host.os_reserve_gb - host.cuda_context_gb) * GB - (
        pool(0.3) + pool(0.4)
    )
    refusal = VllmErrors(version).free_memory(free=free, total=total, utilization=0.5)
    assert "Free memory on device" in refusal and refusal in third.log()
    assert "less than desired GPU memory utilization (0.5," in third.log()
    assert shows(0.3, 0.4)  # the refused server took nothing

    second.proc.send_signal(signal.SIGKILL)  # no clean-up: the first's next write drops it
    second.proc.wait(timeout=10)
    wait_for(lambda: shows(0.3), 10, "the killed server's memory gone from meminfo")
    assert len(footprint_files(meminfo)) == 1

    again = start(0.5)  # with the memory back, the same command fits
    wait_for(lambda: shows(0.3, 0.5), 10, "the first and the restarted third")
    assert again.stop() == 0  # a clean stop: its memory back at once
    assert shows(0.3)
    assert first.stop() == 0  # the last one: the file says the host is free
    assert shows()
    assert footprint_files(meminfo) == []

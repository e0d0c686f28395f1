"""The process engine against real sparksim processes."""

import httpx
import pytest

from apps.hosts.engines import base
from apps.hosts.engines.base import EngineError, LaunchSpec, State
from apps.hosts.engines.process import ProcessEngine, _children
from tests.conftest import free_port, wait_for
from tests.hosts.conftest import logs_until

MODEL = "nvidia/Qwen3.5-35B-A3B-NVFP4"


def _argv(port: int, utilization: str = "0.90") -> list[str]:
    return ["vllm", "serve", MODEL, "--host", "127.0.0.1", "--port", str(port),
            "--gpu-memory-utilization", utilization, "--max-model-len", "8192", "--max-num-seqs", "2"]  # fmt: skip


@pytest.fixture
def engine(tmp_path):
    eng = ProcessEngine(runs_dir=tmp_path / "runs", simulated=True,
                        sim_args=["--time-scale", "50", "--load-time-scale", "2000"])  # fmt: skip
    yield eng
    for managed in eng.list_managed():
        eng.stop(managed.handle, timeout=5)


def test_start_follow_logs_serve_stop(engine):
    port = free_port()
    handle = engine.start(
        LaunchSpec(run_id=1, host_name="sim", argv=_argv(port), image="x", port=port)
    )
    lines = logs_until(engine, handle, "Application startup complete.")
    assert any("Loading safetensors checkpoint shards" in line for line in lines)
    assert engine.status(handle).state is State.RUNNING
    assert httpx.get(f"http://127.0.0.1:{port}/version").json()["simulated"] is True
    assert [m.run_id for m in engine.list_managed()] == [1]
    engine.stop(handle, timeout=10)
    status = engine.status(handle)
    assert status.state is State.EXITED and status.exit_code == 0
    engine.remove(handle)
    assert engine.list_managed() == []


def test_the_engine_refuses_an_unsafe_vector_before_starting_anything(engine, tmp_path):
    with pytest.raises(EngineError, match="refused to start"):
        engine.start(
            LaunchSpec(
                run_id=2, host_name="sim", argv=_argv(free_port(), "0.95"), image="x", port=1
            )
        )
    no_flag = [a for a in _argv(free_port()) if a not in ("--gpu-memory-utilization", "0.90")]
    with pytest.raises(EngineError, match="missing"):
        engine.start(LaunchSpec(run_id=3, host_name="sim", argv=no_flag, image="x", port=1))
    assert not (tmp_path / "runs" / "2").exists()


def test_a_redelivered_start_does_not_launch_a_second_server(engine):
    port = free_port()
    spec = LaunchSpec(run_id=4, host_name="sim", argv=_argv(port), image="x", port=port)
    first = engine.start(spec)
    again = engine.start(spec)
    assert again == first
    assert len(engine.list_managed()) == 1


def test_a_restarted_worker_finds_its_process_and_sees_it_die(engine, tmp_path):
    port = free_port()
    handle = engine.start(
        LaunchSpec(run_id=5, host_name="sim", argv=_argv(port), image="x", port=port)
    )
    logs_until(engine, handle, "Application startup complete.")
    pid = int(handle.ref.split(":")[0])
    child = _children.pop(pid)  # what a worker restart forgets
    fresh = ProcessEngine(runs_dir=tmp_path / "runs", simulated=True)
    adopted = fresh.list_managed()
    assert [(m.run_id, m.handle, m.status.state) for m in adopted] == [(5, handle, State.RUNNING)]
    child.kill()
    child.wait()
    wait_for(lambda: fresh.status(handle).state is State.EXITED, 5, "exit seen")
    assert fresh.status(handle).exit_code is None  # not our child: code unknowable


def test_a_recycled_pid_is_not_mistaken_for_the_server(engine):
    fake = base.Handle("process", "1:12345.00")  # pid 1 exists, but started at another time
    assert engine.status(fake).state is State.EXITED

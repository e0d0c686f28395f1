"""The Docker engine: its fixed container template, and the whole lifecycle against a
real Docker engine running sparksim in a container."""

import dataclasses

import docker
import httpx
import pytest

from apps.hosts.engines.base import EngineError, LaunchSpec, State
from apps.hosts.engines.docker import (
    HF_CACHE_IN_CONTAINER,
    LABEL_HOST,
    LABEL_RUN,
    DockerEngine,
    container_name,
    sim_runtime_mounts,
)
from tests.conftest import free_port, wait_for
from tests.hosts.conftest import logs_until

MODEL = "nvidia/Qwen3.5-35B-A3B-NVFP4"
IMAGE = "vllm/vllm-openai:v0.11.0"


def _argv(port: int, utilization: str = "0.80", host: str = "127.0.0.1") -> list[str]:
    return ["vllm", "serve", MODEL, "--host", host, "--port", str(port),
            "--gpu-memory-utilization", utilization, "--max-model-len", "8192", "--max-num-seqs", "2"]  # fmt: skip


def _spec(port: int, run_id: int = 7, **kw) -> LaunchSpec:
    return LaunchSpec(run_id=run_id, host_name="spark-1", argv=kw.pop("argv", _argv(port)),
                      image=kw.pop("image", IMAGE), port=port, **kw)  # fmt: skip


# --- the template (no Docker engine needed) -----------------------------------------------


def test_a_real_spark_container_gets_the_gpus_the_hf_cache_the_token_and_nothing_more():
    engine = DockerEngine(
        host_name="spark-1", hf_cache="/srv/hf", hf_token="hf_secret_123", shm_size_gib=16,
        image_allowlist=["vllm/vllm-openai:*"], client=object(),
    )  # fmt: skip
    config = engine.container_config(_spec(8100, env={"HF_TOKEN": "from-a-recipe", "X": "1"}))
    assert config["image"] == IMAGE
    assert config["entrypoint"] == ["vllm"]
    assert config["command"][:2] == ["serve", MODEL]
    [gpus] = config["device_requests"]
    assert gpus["Count"] == -1 and gpus["Capabilities"] == [["gpu"]]
    assert config["volumes"] == {"/srv/hf": {"bind": HF_CACHE_IN_CONTAINER, "mode": "rw"}}
    assert config["environment"] == {"X": "1", "HF_TOKEN": "hf_secret_123"}
    assert config["labels"] == {LABEL_RUN: "7", LABEL_HOST: "spark-1"}
    assert config["name"] == container_name("spark-1", 7)
    assert config["shm_size"] == "16384m"
    assert config["privileged"] is False and config["cap_add"] == []
    assert config["ports"] == {"8100/tcp": 8100}
    for forbidden in ("pid_mode", "ipc_mode", "network_mode", "devices", "mounts", "userns_mode",
                      "cap_drop", "volumes_from", "sysctls", "security_opt_extra"):  # fmt: skip
        assert forbidden not in config
    assert "hf_secret_123" not in repr(engine)


def test_the_host_network_and_a_publish_address_come_from_the_host_settings():
    on_host = DockerEngine(host_name="s", network="host", client=object())
    assert on_host.container_config(_spec(8100))["network_mode"] == "host"
    assert "ports" not in on_host.container_config(_spec(8100))
    bound = DockerEngine(host_name="s", publish_address="10.0.0.5", client=object())
    assert bound.container_config(_spec(8100))["ports"] == {"8100/tcp": ("10.0.0.5", 8100)}
    with pytest.raises(EngineError, match="network mode"):
        DockerEngine(host_name="s", network="container:other")
    with pytest.raises(EngineError, match="shm size"):
        DockerEngine(host_name="s", shm_size_gib=512)


@pytest.mark.parametrize(
    "argv",
    [
        _argv(8100, utilization="0.95"),
        [a for a in _argv(8100) if a not in ("--gpu-memory-utilization", "0.80")],
        ["sh", "-c", "vllm serve x --gpu-memory-utilization 0.5"],
        [*_argv(8100), "--gpu-memory-utilization=0.5"],
    ],
    ids=["0.95", "missing", "shell", "twice"],
)
def test_the_final_guard_refuses_unsafe_vectors(argv):
    engine = DockerEngine(host_name="s", client=object())
    with pytest.raises(EngineError, match="refused to start"):
        engine.container_config(_spec(8100, argv=argv))


def test_an_image_off_the_allowlist_is_refused():
    engine = DockerEngine(host_name="s", image_allowlist=["vllm/vllm-openai:*"], client=object())
    with pytest.raises(EngineError, match="not on s's allowlist"):
        engine.container_config(_spec(8100, image="evil/miner:latest"))


def test_a_simulated_container_mounts_only_the_runtime_read_only_and_its_state_dir(tmp_path):
    engine = DockerEngine(
        host_name="s", simulated=True, sim_args=["--time-scale", "50"],
        sim_state_dir=str(tmp_path / "state"), gpus=False, client=object(),
    )  # fmt: skip
    config = engine.container_config(_spec(8100))
    assert config["command"][:3] == ["-m", "sparksim", "serve"]
    assert config["command"][-2:] == ["--time-scale", "50"]
    ro = {path for path, m in config["volumes"].items() if m["mode"] == "ro"}
    rw = {path for path, m in config["volumes"].items() if m["mode"] == "rw"}
    assert ro == set(sim_runtime_mounts())
    assert rw == {str(tmp_path / "state")}
    assert "device_requests" not in config


# --- against the real Docker engine ---------------------------------------------------------


@pytest.fixture
def engine(docker_url, tmp_path):
    eng = DockerEngine(
        host_name="engine-test", base_url=docker_url, network="host", gpus=False,
        simulated=True, sim_args=["--time-scale", "50", "--load-time-scale", "2000"],
        sim_state_dir=str(tmp_path / "state"),
    )  # fmt: skip
    yield eng
    for container in eng.client.containers.list(
        all=True, filters={"label": f"{LABEL_HOST}=engine-test"}
    ):
        container.remove(force=True)


@pytest.mark.services
def test_start_follow_logs_serve_stop_and_remove_in_a_real_container(engine):
    port = free_port()
    handle = engine.start(_spec(port, run_id=1))
    lines = logs_until(engine, handle, "Application startup complete.")
    assert any("Loading safetensors checkpoint shards" in line for line in lines)
    # Read incrementally by timestamp: no line twice.
    assert sum("Application startup complete." in line for line in lines) == 1
    assert engine.status(handle).state is State.RUNNING
    assert httpx.get(f"http://127.0.0.1:{port}/version").json()["simulated"] is True
    [managed] = engine.list_managed()
    assert managed.run_id == 1 and managed.handle == handle
    attrs = engine.client.containers.get(handle.ref).attrs
    assert attrs["HostConfig"]["Privileged"] is False
    assert not attrs["HostConfig"]["CapAdd"]
    assert attrs["HostConfig"]["PidMode"] == "" and attrs["HostConfig"]["IpcMode"] != "host"
    assert all(
        m["RW"] is False for m in attrs["Mounts"] if m["Destination"] != engine.sim_state_dir
    )

    engine.stop(handle, timeout=10)
    status = engine.status(handle)
    assert status.state is State.EXITED and status.exit_code == 0  # sparksim exits 0 on SIGTERM
    engine.remove(handle)
    assert engine.status(handle).state is State.MISSING
    assert engine.list_managed() == []


@pytest.mark.services
def test_a_hosts_model_folder_is_mounted_read_only_and_a_missing_one_is_a_clear_error(
    engine, tmp_path
):
    """An admin's model folder (Host.model_folders) is the one kind of mount beside the
    cache: read-only at its container path; a folder missing on the Spark fails the start
    with Docker's reason instead of an empty folder Docker would create."""
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    engine.model_folders = [f"{draft}:/drafter"]
    port = free_port()
    handle = engine.start(_spec(port, run_id=5))
    attrs = engine.client.containers.get(handle.ref).attrs
    [mount] = [m for m in attrs["Mounts"] if m["Destination"] == "/drafter"]
    assert mount["Source"] == str(draft) and mount["RW"] is False and mount["Type"] == "bind"
    engine.stop(handle, timeout=10)
    engine.remove(handle)

    engine.model_folders = [f"{tmp_path / 'absent'}:/drafter"]
    with pytest.raises(EngineError, match="does not exist"):
        engine.start(_spec(free_port(), run_id=6))
    assert not (tmp_path / "absent").exists()


MOD_RUN = b'#!/bin/sh\nset -e\ncp chat_template.jinja "$WORKSPACE_DIR/team.jinja"\necho patched\n'


@pytest.mark.services
def test_reviewed_mods_make_a_derived_image_once_and_a_failing_mod_stops_the_start(
    engine, shell_image
):
    """sparkrun's way — the files at /workspace/mods/<name>, ./run.sh there with
    WORKSPACE_DIR the image's working directory — committed into an image the run uses."""
    from apps.hosts.engines.docker_mods import LABEL_MOD, derived_repository, modded_image
    from sparkdomain.mods import ModBundle, derived_tag

    bundle = ModBundle("fix-template", {"run.sh": MOD_RUN, "chat_template.jinja": b"{{ m }}"})
    base_id = engine.client.images.get(shell_image).id
    built_before = f"{derived_repository('engine-test')}:{derived_tag(base_id, [bundle])}"
    if engine.has_image(built_before):  # images stay per machine: build it in this test
        engine.client.images.remove(built_before, force=True)
    said: list[str] = []
    ref = modded_image(engine, shell_image, [bundle], say=said.append)
    assert ref.startswith("sparkpanel-mods/engine-test:")
    from tests.conftest import read_file_in_image

    assert read_file_in_image(engine.client, ref, "/app/team.jinja") == b"{{ m }}"
    assert engine.client.images.get(ref).attrs["Config"]["WorkingDir"] == "/app"
    assert "Applying mod fix-template (1 of 1)" in said
    assert modded_image(engine, shell_image, [bundle], say=said.append) == ref  # built once
    assert said[-1].startswith("Mods already applied")

    broken = ModBundle("broken", {"run.sh": b"#!/bin/sh\necho cannot patch this vLLM\nexit 3\n"})
    with pytest.raises(EngineError, match=r"run\.sh exited 3.*cannot patch this vLLM"):
        modded_image(engine, shell_image, [bundle, broken])
    leftovers = engine.client.containers.list(all=True, filters={"label": LABEL_MOD})
    assert leftovers == []

    # A start with mods runs its server from the derived image (sparksim, in this image).
    engine.sim_image = shell_image
    port = free_port()
    handle = engine.start(_spec(port, run_id=9, mods=(bundle,)))
    logs_until(engine, handle, "Application startup complete.")
    image = engine.client.containers.get(handle.ref).attrs["Config"]["Image"]
    assert image == ref
    engine.stop(handle, timeout=10)
    engine.remove(handle)


@pytest.mark.services
def test_a_redelivered_start_returns_the_same_container(engine):
    port = free_port()
    first = engine.start(_spec(port, run_id=2))
    again = engine.start(_spec(port, run_id=2))
    assert first == again
    assert len(engine.list_managed()) == 1


@pytest.mark.services
def test_a_container_killed_from_outside_is_seen_with_its_exit_code(engine):
    port = free_port()
    handle = engine.start(_spec(port, run_id=3))
    logs_until(engine, handle, "Application startup complete.")
    docker.DockerClient(base_url=engine.base_url).containers.get(handle.ref).kill()
    wait_for(lambda: engine.status(handle).state is State.EXITED, 10, "the container exits")
    status = engine.status(handle)
    assert status.exit_code == 137
    assert "exited with code 137" in status.describe()
    assert any("Application startup complete." in line for line in engine.tail(handle, 40))


@pytest.mark.services
def test_the_guard_refuses_0_95_before_any_container_exists(engine):
    with pytest.raises(EngineError, match=r"0\.9"):
        engine.start(_spec(free_port(), run_id=4, argv=_argv(8100, utilization="0.95")))
    assert engine.list_managed() == []


@pytest.mark.services
def test_an_unreachable_docker_engine_is_a_clear_error(tmp_path):
    engine = DockerEngine(host_name="s", base_url=f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(EngineError, match="cannot reach the Docker engine"):
        engine.list_managed()


@pytest.mark.services
def test_unmanaged_containers_are_listed_and_managed_ones_are_not(engine):
    engine.start(_spec(free_port(), run_id=5))
    # Someone's own container on the Spark, started by hand (no panel labels).
    config = engine.container_config(_spec(free_port(), run_id=6))
    config.update(name="someones-own", labels={"owner": "alice"},
                  command=["-c", "import time; time.sleep(60)"])  # fmt: skip
    other = engine.client.containers.run(**config)
    try:
        listed = engine.list_unmanaged()
        assert [
            item["name"]
            for item in listed
            if item["name"].startswith(("someones", "sparkpanel-engine-test"))
        ] == ["someones-own"]
        assert listed[0]["image"]
    finally:
        other.remove(force=True)


@pytest.mark.services
def test_the_link_check_runs_on_the_hosts_network_in_a_container_that_goes_away(engine):
    """A worker in a Compose container sees its own network: the check runs in a container
    of its own on the host's network, and reads the Spark's interfaces."""
    import socket

    from apps.hosts.engines.base import RayNodeSpec
    from ray_adapter import link, nodes

    node = nodes.RayNode(role="worker", node_ip="127.0.0.3", head_ip="127.0.0.2",
                         gcs_port=free_port(), nccl_interface="enp1s0f1np1")  # fmt: skip
    output = engine.check_link(RayNodeSpec(run_id=7, host_name="engine-test", node=node,
                                           image="unused-by-a-simulated-host"))  # fmt: skip
    problem = link.link_problem(output, "enp1s0f1np1", "127.0.0.3")
    assert problem.kind == "missing"
    here = sorted(name for _, name in socket.if_nameindex())  # this machine's, not a bridge's
    assert problem.reason.endswith(f"(it has: {', '.join(here)})")
    lo = dataclasses.replace(node, nccl_interface="lo")
    output = engine.check_link(RayNodeSpec(run_id=7, host_name="engine-test", node=lo,
                                           image="unused-by-a-simulated-host"))  # fmt: skip
    assert link.link_problem(output, "lo", "127.0.0.3") is None
    assert engine.list_managed() == []  # the check's container is gone

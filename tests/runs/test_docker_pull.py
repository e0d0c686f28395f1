"""A Docker host pulls the run's image first, with live progress (layers and bytes), from
a real registry (sparksim's, on 127.0.0.1) through the real Docker engine."""

import re
import threading
import time
import uuid

import docker
import pytest

from apps.runs import runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from sparksim.registry import ImageSpec, Registry

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]
MIB = 2**20


def test_a_run_pulls_its_image_with_progress_then_starts(docker_sim_host, qwen, operator):
    spec = ImageSpec("vllm/vllm-openai", f"t{uuid.uuid4().hex[:8]}", layer_sizes=(3 * MIB, 6 * MIB))
    with Registry([spec], rate_bytes_per_s=3 * MIB) as registry:
        ref = registry.reference(spec)
        docker_sim_host.sim_image = ref
        docker_sim_host.save()
        run = run_start(recipe=qwen, host=docker_sim_host, user=operator)
        seen: list[tuple[str, float, str]] = []
        worker = threading.Thread(target=runner.start, args=[run.pk])
        worker.start()
        while worker.is_alive():
            row = Run.objects.filter(pk=run.pk).values_list("state", "percent", "step").first()
            if not seen or seen[-1] != row:
                seen.append(row)
            time.sleep(0.05)
        worker.join()
    client = docker.DockerClient(base_url=docker_sim_host.docker_url)
    try:
        run.refresh_from_db()
        assert run.state == RunState.READY, (run.failure_reason, run.failure_log)
        pulling = [(p, step) for state, p, step in seen if state == RunState.PULLING]
        # Real progress: several distinct percentages between 0 and 100, in order, with
        # layers and bytes named.
        partial = [p for p, _ in pulling if 0 < p < 100]
        assert len(set(partial)) >= 2 and partial == sorted(partial), pulling
        assert any(re.fullmatch(r"Pulling: [012]/2 layers, [\d.]+ MB of 9\.\d MB", step)
                   for _, step in pulling), pulling  # fmt: skip
        assert run.phase_seconds()["pulling"] > 2  # 9 MiB at 3 MiB/s
        assert client.images.get(ref)
    finally:
        runner.stop(run.pk)
        client.images.remove(ref, force=True)


def test_a_pull_that_fails_fails_the_run_with_dockers_reason(docker_sim_host, qwen, operator):
    with Registry([ImageSpec("vllm/vllm-openai", "v1", layer_sizes=(1024,))]) as registry:
        docker_sim_host.sim_image = f"{registry.address}/vllm/vllm-openai:no-such-tag"
        docker_sim_host.save()
        run = run_start(recipe=qwen, host=docker_sim_host, user=operator)
        runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert run.failure_reason.startswith("pulling ") and "manifest unknown" in run.failure_reason
    assert "pulling" in run.timings
    assert "registry" in run.failure_advice


def test_a_stop_during_the_pull_ends_it_and_starts_nothing(docker_sim_host, qwen, operator):
    spec = ImageSpec("vllm/vllm-openai", f"t{uuid.uuid4().hex[:8]}", layer_sizes=(16 * MIB,))
    with Registry([spec], rate_bytes_per_s=2 * MIB) as registry:
        docker_sim_host.sim_image = registry.reference(spec)
        docker_sim_host.save()
        run = run_start(recipe=qwen, host=docker_sim_host, user=operator)
        worker = threading.Thread(target=runner.start, args=[run.pk])
        worker.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            row = Run.objects.get(pk=run.pk)
            if row.state == RunState.PULLING and row.percent > 0:
                break
            time.sleep(0.05)
        from apps.runs.services import run_stop

        run_stop(run=Run.objects.get(pk=run.pk))
        worker.join(timeout=30)
        assert not worker.is_alive()
    run.refresh_from_db()
    assert run.state == RunState.STOPPED
    assert not run.handle

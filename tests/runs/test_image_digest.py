"""The image digest with every run and benchmark job, against the real Docker engine and a
real registry (sparksim's, on 127.0.0.1): a pulled image has a RepoDigest, and when the
tag moves under you (a nightly), the next run records the new digest while the old run
keeps the one it ran."""

import csv
import io
import json
import uuid

import docker
import pytest
from django.urls import reverse

from apps.benchmarks import runner as job_runner
from apps.benchmarks.models import J, Suite
from apps.benchmarks.services import job_queue
from apps.hosts.engines.base import LaunchSpec
from apps.hosts.engines.docker import DockerEngine, repo_digest
from apps.runs import runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from sparksim.registry import ImageSpec, Registry

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]
KIB = 1024


def test_repo_digest_picks_the_entry_of_the_references_repository():
    digests = ["127.0.0.1:5000/vllm/vllm-openai@sha256:aa", "vllm/vllm-openai@sha256:bb"]
    assert repo_digest("vllm/vllm-openai:nightly", digests) == "vllm/vllm-openai@sha256:bb"
    assert repo_digest("docker.io/vllm/vllm-openai:x", digests) == "vllm/vllm-openai@sha256:bb"
    assert repo_digest("127.0.0.1:5000/vllm/vllm-openai:t", digests) == digests[0]
    assert repo_digest("other/image:1", digests) == digests[0]  # else the first
    assert repo_digest("ubuntu:24.04", ["ubuntu@sha256:cc"]) == "ubuntu@sha256:cc"
    assert repo_digest("vllm/vllm-openai:nightly", []) == ""


def test_the_docker_engine_reads_the_registrys_digest_after_the_pull(docker_url):
    spec = ImageSpec("vllm/vllm-openai", f"t{uuid.uuid4().hex[:8]}", layer_sizes=(4 * KIB,))
    with Registry([spec]) as registry:
        ref = registry.reference(spec)
        # A local registry's image is not the official one: the host's admin allows it.
        engine = DockerEngine(host_name="spark-1", base_url=docker_url, gpus=False,
                              image_allowlist=[f"{registry.address}/vllm/vllm-openai:*"])  # fmt: skip
        launch = LaunchSpec(run_id=1, host_name="spark-1", argv=["vllm"], image=ref, port=1)
        before = engine.image_identity(launch)
        assert (before.reference, before.digest, before.image_id) == (ref, "", "")  # not here
        engine.pull(launch)
        try:
            got = engine.image_identity(launch)
            built = registry.image(spec)
            assert got.digest == built.manifest_digest  # what the registry serves for the tag
            assert got.pinned == f"{registry.address}/vllm/vllm-openai@{built.manifest_digest}"
            assert got.image_id == built.config_digest
        finally:
            engine.client.images.remove(ref, force=True)


def test_a_run_records_the_digest_and_a_moved_tag_gives_the_next_run_a_new_one(
    docker_sim_host, qwen, operator, client_as
):
    tag = f"nightly-{uuid.uuid4().hex[:6]}"
    old, new = (
        ImageSpec("vllm/vllm-openai", tag, (4 * KIB,)),
        ImageSpec("vllm/vllm-openai", tag, (5 * KIB,)),
    )
    client = docker.DockerClient(base_url=docker_sim_host.docker_url)
    with Registry([old]) as registry:
        ref = registry.reference(old)
        docker_sim_host.sim_image = ref
        docker_sim_host.save()
        try:
            first = run_start(recipe=qwen, host=docker_sim_host, user=operator)
            runner.start(first.pk)  # pulls the tag, then starts sparksim in it
            first.refresh_from_db()
            assert first.state == RunState.READY, (first.failure_reason, first.failure_log)
            runner.stop(first.pk)
            assert first.image_digest == registry.image(old).manifest_digest
            assert first.image_id == registry.image(old).config_digest

            # The nightly moves: same tag, new content; the Spark pulls it again.
            registry.images = [new]
            client.images.pull(ref)
            second = run_start(recipe=qwen, host=docker_sim_host, user=operator)
            runner.start(second.pk)
            second.refresh_from_db()
            assert second.state == RunState.READY, (second.failure_reason, second.failure_log)
            runner.stop(second.pk)
        finally:
            client.images.remove(ref, force=True)
    assert second.image_digest == registry.image(new).manifest_digest != first.image_digest
    first.refresh_from_db()
    assert first.image_digest == registry.image(old).manifest_digest  # kept what it ran

    member = client_as(operator)
    page = member.get(first.get_absolute_url()).content.decode()
    assert first.image_digest in page and f"docker pull {first.image_pinned}" in page
    assert second.image_digest not in page
    api = member.get(f"/api/v1/runs/{second.pk}").json()
    assert api["image_digest"] == second.image_digest
    assert api["image_pinned"] == f"{registry.address}/vllm/vllm-openai@{second.image_digest}"
    listed = {r["id"]: r for r in member.get("/api/v1/runs").json()["items"]}
    assert listed[first.pk]["image_digest"] == first.image_digest
    # Both starts corrected the plan; the recipe page says the tag moved between them.
    recipe_page = member.get(qwen.get_absolute_url()).content.decode()
    assert "the tag moved between starts" in recipe_page
    assert first.image_digest[:19] in recipe_page and second.image_digest[:19] in recipe_page


def test_a_benchmark_job_keeps_the_digest_of_the_image_it_measured(
    docker_sim_host, qwen, member, client_as
):
    spec = ImageSpec("vllm/vllm-openai", f"t{uuid.uuid4().hex[:8]}", layer_sizes=(4 * KIB,))
    suite = Suite.objects.create(
        name="tiny", scenarios=[{"name": "short", "prompt_tokens": 32, "output_tokens": 8}],
        repetitions=1, warmup_requests=0, sweep_enabled=False,
    )  # fmt: skip
    client = docker.DockerClient(base_url=docker_sim_host.docker_url)
    with Registry([spec]) as registry:
        ref = registry.reference(spec)
        docker_sim_host.sim_image = ref
        docker_sim_host.save()
        try:
            job = job_queue(suite=suite, recipe=qwen, host=docker_sim_host, user=member)
            job_runner.run_job(job.pk)
            again = job_queue(suite=suite, recipe=qwen, host=docker_sim_host, user=member)
            job_runner.run_job(again.pk)  # reuses the ready run
            job.refresh_from_db()
            again.refresh_from_db()
            runner.stop(job.run_id)
        finally:
            client.images.remove(ref, force=True)
    assert job.state == J.DONE, job.error
    digest = registry.image(spec).manifest_digest
    assert job.image_digest == digest == Run.objects.get(pk=job.run_id).image_digest
    assert job.context["image_pinned"] == f"{registry.address}/vllm/vllm-openai@{digest}"

    browser = client_as(member)
    page = browser.get(job.get_absolute_url()).content.decode()
    assert digest in page and f"docker pull {job.context['image_pinned']}" in page
    rows = list(csv.DictReader(io.StringIO(
        browser.get(reverse("benchmark-csv", args=[job.pk])).content.decode()
    )))  # fmt: skip
    assert rows and all(row["image_digest"] == digest for row in rows)
    exported = json.loads(browser.get(reverse("benchmark-json", args=[job.pk])).content)
    assert exported["context"]["image_digest"] == digest
    assert browser.get(f"/api/v1/jobs/{job.pk}").json()["image_digest"] == digest
    assert again.image_digest == digest and again.run_id == job.run_id
    compare = browser.get(reverse("benchmark-compare") + f"?jobs={job.pk},{again.pk}")
    assert compare.content.decode().count(f'<code title="{digest}">') == 2

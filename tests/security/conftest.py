"""A small panel with one of everything, for the security walks.

The objects a member could be tempted to touch (a conversation, a webhook, a token, a
queued job) belong to the operator, so a member's request on them is a request on
someone else's object.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.api.models import Webhook
from apps.api.tokens import token_create
from apps.benchmarks.models import Job, JobState, Result, Suite
from apps.benchmarks.selectors import suite_plan
from apps.chat.models import Comparison, Conversation, Message, SystemPromptPreset
from apps.core.models import Notice
from apps.gateway.keys import key_create
from apps.gateway.models import ModelAlias
from apps.hosts.models import Host
from apps.runs.models import Prefetch, Run, RunState
from sparkdomain.command import serve_argv
from tests.conftest import free_port


def _result(job: Job, concurrency: int) -> Result:
    return Result.objects.create(
        job=job, kind=Result.Kind.SWEEP, scenario=f"c{concurrency}", prompt_tokens=200,
        output_tokens=128, concurrency=concurrency, ok=2, ttft_p50_s=0.4, ttft_p95_s=0.5,
        ttft_p99_s=0.6, e2e_p50_s=6.0, decode_tps_p50=22.5, prefill_tps_p50=900.0,
        output_tps=22.5, request_rps=0.2, metrics={"tpot": {"p50": 0.044}},
    )  # fmt: skip


@pytest.fixture
def world(db, settings, tmp_path, qwen, admin_user, operator, member, outsider) -> dict:
    settings.VAR_DIR = tmp_path
    port = free_port()
    host = Host.objects.create(
        name="sec-spark", engine=Host.Engine.DOCKER, simulated=True, gpus=True,
        docker_network=Host.DockerNetwork.BRIDGE, hf_cache_path="/srv/hf-cache",
        image_allowlist=["vllm/vllm-openai:*"], port_min=port, port_max=port + 5,
    )  # fmt: skip
    run = Run.objects.create(
        recipe=qwen, host=host, started_by=operator, port=port, image=qwen.image,
        argv=serve_argv(qwen, host="0.0.0.0", port=port), state=RunState.READY,  # noqa: S104
    )  # fmt: skip
    suite = Suite.objects.create(
        name="sec quick", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 128}],
        repetitions=1, warmup_requests=1, sweep_levels=[1, 2], requests_per_level=2,
    )  # fmt: skip
    queued = Job.objects.create(
        suite=suite, recipe=qwen, host=host, queued_by=operator, plan=suite_plan(suite)
    )
    done = []
    for _ in range(2):
        job = Job.objects.create(
            suite=suite, recipe=qwen, host=host, queued_by=operator, plan=suite_plan(suite),
            state=JobState.DONE, run=run, started_at=timezone.now(), finished_at=timezone.now(),
            context={"image": run.image, "argv": run.argv, "host": host.name},
        )  # fmt: skip
        _result(job, 1)
        _result(job, 2)
        done.append(job)
    conversation = Conversation.objects.create(
        user=operator, run=run, recipe=qwen, title="operator's chat"
    )
    message = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, content="hello", run=run
    )
    preset = SystemPromptPreset.objects.create(
        name="operator's preset", text="Answer in French.", created_by=operator
    )
    comparison = Comparison.objects.create(user=operator, title="operator's comparison")
    Conversation.objects.create(user=operator, run=run, recipe=qwen, comparison=comparison)
    token, _clear = token_create(user=operator, name="operator ci")
    gateway_key, _clear = key_create(user=operator, name="operator's Open WebUI")
    alias = ModelAlias.objects.create(name="world-alias", recipe=qwen)
    webhook = Webhook.objects.create(
        user=operator, url="http://127.0.0.1:9/hook", secret="whsec-operator-0123456789",
        events=[Webhook.Event.JOB_FINISHED],
    )  # fmt: skip
    notice = Notice.objects.create(author=operator, message="Maintenance at 14:00")
    # A model in the host's cache that nothing uses (deletable), and a queued download.
    host.weights_cache = {"path": "/srv/hf-cache", "free_bytes": 10**12, "total_bytes": 2 * 10**12,
                          "models": [{"repo": "org/old-model", "size": 10**9, "partial": 0,
                                      "last_accessed": 0.0, "revisions": [{
                                          "commit": "a" * 40, "refs": ["main"], "size": 10**9,
                                          "files": 3, "last_modified": 0.0}]}]}  # fmt: skip
    host.save(update_fields=["weights_cache"])
    prefetch = Prefetch.objects.create(recipe=qwen, host=host, requested_by=operator,
                                       repo_id="org/other-model")  # fmt: skip
    return {
        "prefetch": prefetch,
        "notice": notice,
        "host": host,
        "host_name": host.name,
        "recipe": qwen,
        "recipe_slug": qwen.slug,
        "run": run,
        "suite": suite,
        "job": queued,
        "done_jobs": done,
        "conversation": conversation,
        "message": message,
        "preset": preset,
        "comparison": comparison,
        "token": token,
        "gateway_key": gateway_key,
        "alias": alias,
        "webhook": webhook,
        "user": operator,  # the Users page's actions on an account
    }

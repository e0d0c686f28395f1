"""A simulated host's *simulated answers* field (issue 43) reaches sparksim as
`--answers`, through both engines' simulated paths; a real Spark's vLLM never gets it."""

from __future__ import annotations

import re

import httpx
import pytest

from apps.hosts.engines import engine_for
from apps.hosts.engines.base import LaunchSpec
from apps.hosts.models import Host
from sparksim.arguments import build_parser, split_sim_flags
from tests.conftest import free_port
from tests.hosts.conftest import logs_until

MODEL = "nvidia/Qwen3.5-35B-A3B-NVFP4"


def _argv(port: int) -> list[str]:
    return ["vllm", "serve", MODEL, "--host", "127.0.0.1", "--port", str(port),
            "--gpu-memory-utilization", "0.80", "--max-model-len", "8192", "--max-num-seqs", "2"]  # fmt: skip


def _spec(port: int) -> LaunchSpec:
    return LaunchSpec(run_id=1, host_name="h", argv=_argv(port), image="vllm/vllm-openai:v0.11.0",
                      port=port)  # fmt: skip


def _answers(command: list[str]) -> str:
    """What sparksim makes of the command: its own parser, as `python -m sparksim` runs."""
    start = command.index("serve")
    sim, _ = split_sim_flags(command[start + 1 :])
    return build_parser().parse_args(["serve", *sim]).answers


@pytest.mark.django_db
@pytest.mark.parametrize("answers", ["prose", "markdown"])
def test_the_process_engine_gives_sparksim_the_hosts_answers(answers, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    host = Host.objects.create(name=f"sim-{answers}", engine=Host.Engine.PROCESS,
                               simulated=True, sim_answers=answers)  # fmt: skip
    assert _answers(engine_for(host).command(_argv(8100))) == answers


@pytest.mark.django_db
def test_the_docker_engines_simulated_container_gets_the_hosts_answers(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    host = Host.objects.create(name="dsim", engine=Host.Engine.DOCKER, simulated=True,
                               gpus=False, sim_answers=Host.SimAnswers.MARKDOWN)  # fmt: skip
    command = engine_for(host).container_config(_spec(8100))["command"]
    assert command[:2] == ["-m", "sparksim"]
    assert _answers(command) == "markdown"


@pytest.mark.django_db
def test_a_real_sparks_vllm_gets_no_answers_flag(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    host = Host.objects.create(name="spark", engine=Host.Engine.PROCESS, simulated=False,
                               sim_answers=Host.SimAnswers.MARKDOWN)  # fmt: skip
    assert "--answers" not in engine_for(host).command(_argv(8100))


def test_a_host_with_markdown_answers_serves_markdown(sim_host):
    """The whole path: the host field, engine_for's vector, a real sparksim answering."""
    sim_host.sim_answers = Host.SimAnswers.MARKDOWN
    sim_host.sim_time_scale = 500
    sim_host.save()
    engine = engine_for(sim_host)
    port = free_port()
    handle = engine.start(_spec(port))
    logs_until(engine, handle, "Application startup complete.")
    answer = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
              "max_tokens": 1100, "ignore_eos": True},
        timeout=60,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    content = answer.json()["choices"][0]["message"]["content"]
    assert re.search(r"^\|(?::?-{3,}:?\|)+$", content, re.MULTILINE)  # a table's rule
    assert re.search(r"^```(?:python|bash|json|yaml)$", content, re.MULTILINE)

"""Runs and hosts pages: who may see and do what, and what a refused start says."""

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.hosts.models import Host
from apps.runs.models import Run, RunState

pytestmark = pytest.mark.django_db


def test_members_see_runs_and_hosts_but_cannot_start_or_stop(client_as, member, sim_host, qwen):
    client = client_as(member)
    assert client.get(reverse("runs")).status_code == 200
    assert b'id="start-form"' not in client.get(reverse("runs")).content
    response = client.post(reverse("run-start"), {"recipe": qwen.pk, "host": sim_host.pk})
    assert response.status_code == 403
    assert not Run.objects.exists()
    run = Run.objects.create(
        recipe=qwen, host=sim_host, port=20001, image="x", state=RunState.READY
    )
    assert client.get(run.get_absolute_url()).status_code == 200
    assert client.post(reverse("run-stop", args=[run.pk])).status_code == 403
    assert Run.objects.get(pk=run.pk).state == RunState.READY


def test_hosts_page_shows_memory_worker_status_and_the_worker_command(client_as, member, sim_host):
    html = client_as(member).get(reverse("hosts")).content.decode()
    assert sim_host.name in html and "simulated" in html
    assert "122.0 of 128 GB" in html  # an idle simulated Spark: all but the OS reserve
    assert "no worker" in html and f"-Q host.{sim_host.name}" in html
    Host.objects.filter(pk=sim_host.pk).update(
        last_heartbeat=timezone.now(), heartbeat_worker="w@spark"
    )
    html = client_as(member).get(reverse("hosts")).content.decode()
    assert "online" in html and "w@spark" in html


def test_a_refused_start_says_why_and_starts_nothing(client_as, operator, sim_host, qwen, tmp_path):
    meminfo = tmp_path / "low.meminfo"
    meminfo.write_text("MemTotal:       125000000 kB\nMemAvailable:     8000000 kB\n")
    sim_host.meminfo_path = str(meminfo)
    sim_host.save()
    response = client_as(operator).post(
        reverse("run-start"), {"recipe": qwen.pk, "host": sim_host.pk}, follow=True
    )
    assert (
        "Not started:" in response.content.decode()
        and "8.2 GB available" in response.content.decode()
    )
    assert not Run.objects.exists()


def test_garbage_start_input_is_refused_clearly(client_as, operator):
    response = client_as(operator).post(
        reverse("run-start"), {"recipe": "nope", "host": ""}, follow=True
    )
    assert "Choose a recipe and a host." in response.content.decode()


def test_members_cannot_restart_and_operators_start_a_finished_run_again(
    client_as, member, operator, sim_host, qwen
):
    old = Run.objects.create(recipe=qwen, host=sim_host, port=20001, image="x",
                             state=RunState.FAILED)  # fmt: skip
    assert client_as(member).post(reverse("run-restart", args=[old.pk])).status_code == 403
    assert Run.objects.count() == 1
    response = client_as(operator).post(reverse("run-restart", args=[old.pk]), follow=True)
    new = Run.objects.exclude(pk=old.pk).get()
    assert new.restart_of == old and new.state == RunState.QUEUED
    html = response.content.decode()
    assert f'A restart of <a href="{old.get_absolute_url()}">run {old.pk}</a>' in html
    html = client_as(member).get(old.get_absolute_url()).content.decode()
    assert f'Restarted as <a href="{new.get_absolute_url()}">run {new.pk}</a>' in html


def test_hosts_page_lists_what_the_panel_did_not_start(client_as, member, sim_host):
    Host.objects.filter(pk=sim_host.pk).update(
        unmanaged=[{"id": "abc", "name": "alices-vllm", "image": "vllm/vllm-openai:nightly",
                    "status": "running"}],
        inventory_at=timezone.now(),
    )  # fmt: skip
    html = client_as(member).get(reverse("hosts")).content.decode()
    assert "alices-vllm" in html and "vllm/vllm-openai:nightly" in html
    assert "planner cannot count them" in html


def test_the_progress_shows_elapsed_time_and_an_estimate_while_loading(
    client_as, member, sim_host, qwen
):
    run = Run.objects.create(recipe=qwen, host=sim_host, port=20001, image="x")
    run.transition(RunState.STARTING)
    run.transition(RunState.LOADING, percent=50)
    html = client_as(member).get(run.get_absolute_url()).content.decode()
    # The weights' pace, then what comes (a first start: nothing measured it yet).
    assert "elapsed" in html and ">weights ~5 s, then compile and warm-up (unknown" in html
    run.transition(RunState.COMPILING, percent=0)  # named steps: no honest estimate
    html = client_as(member).get(run.get_absolute_url()).content.decode()
    assert "elapsed" in html and ">compile, then warm-up (unknown on the first start)<" in html
    assert "ready in" not in html  # tests/runs/test_ready_eta.py: with earlier starts


def test_the_runs_list_filters_by_host_and_state(client_as, member, sim_host, qwen):
    other = Host.objects.create(name="spark-other", engine=Host.Engine.PROCESS, simulated=True)
    a = Run.objects.create(recipe=qwen, host=sim_host, port=1, image="x", state=RunState.FAILED)
    b = Run.objects.create(recipe=qwen, host=other, port=2, image="x", state=RunState.READY)
    client = client_as(member)

    def shown(query: str) -> set[int]:
        html = client.get(reverse("runs") + query).content.decode()
        return {r.pk for r in (a, b) if f'href="{r.get_absolute_url()}"' in html}

    assert shown("") == {a.pk, b.pk}
    assert shown(f"?host={sim_host.name}") == {a.pk}
    assert shown("?state=active") == {b.pk}
    assert shown("?state=failed&host=spark-other") == set()
    assert "No runs match." in client.get(reverse("runs") + "?state=stopped").content.decode()
    assert shown("?state=<script>") == {a.pk, b.pk}  # garbage is ignored, not an error


def test_a_speculative_runs_page_charts_its_acceptance_and_says_what_it_expects(
    client_as, member, sim_host, qwen
):
    """Issue 41: a run of a recipe with --speculative-config charts vLLM's own acceptance
    (vllm:spec_decode_*) and names the draft and its expected acceptance."""
    qwen.extra_args = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']
    qwen.save()
    run = Run.objects.create(recipe=qwen, host=sim_host, port=20001, image="x",
                             state=RunState.READY)  # fmt: skip
    html = client_as(member).get(run.get_absolute_url()).content.decode()
    assert 'data-telemetry-chart="spec"' in html and 'data-telemetry-chart="spec_len"' in html
    assert "Speculative decoding: ngram, 3 tokens: mean acceptance length" in html
    qwen.extra_args = []
    qwen.save()
    html = client_as(member).get(run.get_absolute_url()).content.decode()
    assert 'data-telemetry-chart="spec"' not in html


def test_a_stopped_run_says_who_asked_and_when(client_as, operator, member, sim_host, qwen):
    """Issue 43: a stopped run's page (and the API) name the person who stopped it and
    when; a stop the panel asked for itself says so, with its reason."""
    from apps.runs.services import run_stop

    run = Run.objects.create(recipe=qwen, host=sim_host, port=20002, image="x",
                             state=RunState.READY)  # fmt: skip
    answer = client_as(operator).post(reverse("run-stop", args=[run.pk]), {"confirm": "1"})
    assert answer.status_code == 302
    run.refresh_from_db()
    assert run.state == RunState.STOPPING and run.stopped_by == operator
    assert run.stop_requested_at is not None
    Run.objects.filter(pk=run.pk).update(state=RunState.STOPPED)
    html = client_as(member).get(run.get_absolute_url()).content.decode()
    line = html.split('data-testid="run-stopped-by">')[1].split("</div>")[0]
    assert "Stop asked by <strong>otto-operator</strong>" in line
    assert timezone.localtime(run.stop_requested_at).strftime("%Y-%m-%d %H:%M") in line
    api = client_as(member).get(f"/api/v1/runs/{run.pk}").json()
    assert api["stopped_by"] == "otto-operator" and api["stop_requested_at"]

    idle = Run.objects.create(recipe=qwen, host=sim_host, port=20003, image="x",
                              state=RunState.READY)  # fmt: skip
    run_stop(run=idle, reason="unloaded after 10 min idle")
    html = client_as(member).get(idle.get_absolute_url()).content.decode()
    line = html.split('data-testid="run-stopped-by">')[1].split("</div>")[0]
    assert "Stop asked by the panel itself" in line and "unloaded after 10 min idle" in line

"""A run's telemetry from its first phase: the host agent sends its samples to the run's
group while the run is still loading (memory during a load is what matters), records
them in the run's history, and the back-fill the pages fetch on every (re)connect has
them — behind a login and the panel role."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import Client

from apps.guard.agent import HostAgent
from apps.runs.models import Run, RunState
from apps.telemetry.groups import run_group
from apps.telemetry.models import HostSample
from apps.telemetry.selectors import backfill

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def _run_in(state: str, host, recipe) -> Run:
    return Run.objects.create(recipe=recipe, host=host, port=20001, state=state,
                              timings={state: {"start": "2026-01-01T00:00:00+00:00"}})  # fmt: skip


def _listen(group: str):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    return layer, channel


@pytest.mark.parametrize("state", [RunState.QUEUED, RunState.STARTING, RunState.LOADING,
                                   RunState.COMPILING])  # fmt: skip
def test_a_loading_run_gets_samples_before_its_server_is_up(redis_url, sim_host, qwen, state):
    run = _run_in(state, sim_host, qwen)
    layer, channel = _listen(run_group(run.pk))
    agent = HostAgent(sim_host.name, bucket_s=0.0)
    try:
        agent.step()
        message = async_to_sync(asyncio.wait_for)(layer.receive(channel), 5)
        sample = message["sample"]
        assert sample["run"] == run.pk and sample["run_state"] == state
        assert sample["host"] == sim_host.name and sample["t"] > 0
        # No /metrics before the server is up: not scraped, so no scrape error either.
        assert sample["scrape_error"] == "" and sample.get("kv_usage_pct") is None
        agent.next_scrape = 0
        agent.step()  # the first 10 s bucket is stored (bucket_s=0)
    finally:
        agent.close()
    assert HostSample.objects.filter(host=sim_host, run=run).exists()
    sim_host.refresh_from_db()
    data = backfill(sim_host, run=run)
    assert data["history"]["t"] and data["latest"]["run"] == run.pk and data["active"] is True


def test_a_run_without_samples_of_its_own_gets_no_foreign_latest(redis_url, sim_host, qwen):
    older = _run_in(RunState.STOPPED, sim_host, qwen)
    current = _run_in(RunState.LOADING, sim_host, qwen)
    agent = HostAgent(sim_host.name)
    try:
        agent.step()
    finally:
        agent.close()
    sim_host.refresh_from_db()
    assert backfill(sim_host, run=current)["latest"]["run"] == current.pk
    old = backfill(sim_host, run=older)
    assert old["latest"] is None and old["active"] is False  # not the other run's numbers


def test_the_backfill_endpoints_need_the_panel_role(sim_host, qwen, member, outsider):
    run = _run_in(RunState.LOADING, sim_host, qwen)
    urls = [
        f"/telemetry/run/{run.pk}/backfill.json",
        f"/telemetry/host/{sim_host.name}/backfill.json",
    ]
    for url in urls:
        assert Client().get(url).status_code == 302  # to the login page
        stranger = Client()
        stranger.force_login(outsider)
        assert stranger.get(url).status_code == 403
        client = Client()
        client.force_login(member)
        response = client.get(url)
        assert response.status_code == 200
        body = response.json()
        assert set(body) >= {"history", "latest", "window_s", "act_bytes", "active", "now"}
        assert response["Cache-Control"].startswith("max-age=0")
        assert client.post(url).status_code == 405
    client = Client()
    client.force_login(member)
    assert client.get("/telemetry/run/999999/backfill.json").status_code == 404
    assert client.get("/telemetry/host/no-such-host/backfill.json").status_code == 404

"""Several runs on one Spark in what the pages read of the host agent (issue #42, point 3):
each run's page gets its own latest sample, the host's charts one point per bucket (the
runs' requests and tokens added up), the panel's /metrics a series per run, and the host
page each run's figures."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.overview.panel_metrics import run_series
from apps.runs.models import Run, RunState
from apps.telemetry.models import HostSample
from apps.telemetry.selectors import backfill

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_runs(sim_host, qwen, too_long):
    sim_host.max_runs = 2
    runs = [Run.objects.create(recipe=recipe, host=sim_host, port=sim_host.port_min + i,
                               image="x", state=RunState.READY, slot=i)
            for i, recipe in enumerate((qwen, too_long))]  # fmt: skip
    memory = {"host": sim_host.name, "mem_total": 128 * 10**9, "mem_available": 40 * 10**9,
              "mem_level": "ok"}  # fmt: skip
    entries = [{"run": runs[0].pk, "run_state": "ready", "pair_worker": False, "running": 3.0,
                "waiting": 0.0, "kv_usage_pct": 12.0, "scrape_error": ""},
               {"run": runs[1].pk, "run_state": "ready", "pair_worker": False, "running": 5.0,
                "waiting": 2.0, "kv_usage_pct": 80.0, "scrape_error": ""}]  # fmt: skip
    sim_host.agent_sample = {**memory, **entries[0], "runs": entries}
    sim_host.agent_seen_at = timezone.now()
    sim_host.save()
    return runs


def test_each_runs_page_gets_its_own_latest_sample(sim_host, two_runs):
    first, second = two_runs
    latest = backfill(sim_host, second)["latest"]
    assert (latest["run"], latest["running"], latest["kv_usage_pct"]) == (second.pk, 5.0, 80.0)
    assert latest["mem_available"] == 40 * 10**9 and "runs" not in latest
    assert backfill(sim_host, first)["latest"]["running"] == 3.0


def test_the_hosts_charts_have_one_point_a_bucket(sim_host, two_runs):
    at = timezone.now() - timedelta(seconds=30)
    for run, running in zip(two_runs, (3.0, 5.0), strict=True):
        HostSample.objects.create(host=sim_host, run=run, at=at, mem_total=128 * 10**9,
                                  mem_available=40 * 10**9, running=running,
                                  kv_usage_pct=running * 10)  # fmt: skip
    history = backfill(sim_host)["history"]
    assert len(history["t"]) == 1
    assert history["running"] == [8.0] and history["kv_usage_pct"] == [30.0]
    assert backfill(sim_host, two_runs[1])["history"]["running"] == [5.0]


def test_metrics_and_the_host_page_name_every_run(sim_host, two_runs, client_as, member):
    families = {f.name: f for f in run_series([(sim_host, sim_host.agent_sample)])}
    running = families["sparkpanel_run_requests_running"]
    assert {s.labels["run"]: s.value for s in running.samples} == {
        str(two_runs[0].pk): 3.0, str(two_runs[1].pk): 5.0}  # fmt: skip
    page = client_as(member).get(reverse("host-detail", args=[sim_host.name])).content.decode()
    assert f"run {two_runs[0].pk}: Requests running" in page
    assert f"run {two_runs[1].pk}: Requests waiting" in page

"""A page per host: memory against the guard's lines, telemetry, vLLM, engine, incidents and
the runs it served."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.hosts.detail import guard_lines_gb
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from apps.telemetry.models import Incident

pytestmark = pytest.mark.django_db

GB = 10**9


def test_the_host_page_shows_memory_lines_facts_incidents_and_history(
    client_as, member, sim_host, qwen, operator
):
    old = Run.objects.create(recipe=qwen, host=sim_host, port=20001, image="x",
                             state=RunState.STOPPED, started_by=operator)  # fmt: skip
    live = Run.objects.create(recipe=qwen, host=sim_host, port=20002, image="x",
                              state=RunState.READY, started_by=operator)  # fmt: skip
    Incident.objects.create(
        host=sim_host, run=old, recipe_name=str(qwen), kind=Incident.Kind.WARN,
        at=timezone.now(), message="MemAvailable 3.1 GB is below the warn line",
        memory_curve=[[0, 3 * 2**30]],
    )  # fmt: skip
    # The host agent's latest sample: 20 GB of 128 available, a model serving.
    Host.objects.filter(pk=sim_host.pk).update(
        agent_seen_at=timezone.now(),
        agent_sample={"mem_total": 128 * GB, "mem_available": 20 * GB, "mem_level": "ok",
                      "running": 2, "waiting": 0, "kv_usage_pct": 12.5, "generation_tps": 48.25},
    )  # fmt: skip
    sim_host.refresh_from_db()
    response = client_as(member).get(reverse("host-detail", args=[sim_host.name]))
    assert response.status_code == 200
    html = response.content.decode()
    warn, act = guard_lines_gb(sim_host)
    assert "20.0 GB available" in html and "above the warn line" in html
    assert f"{warn:.1f} GB available" in html and f"{act:.1f} GB available" in html
    assert "read by the host agent" in html
    assert "KV cache used" in html and "12.5%" in html and "48.2" in html
    assert sim_host.contract_version in html and sim_host.get_engine_display() in html
    assert "MemAvailable 3.1 GB is below the warn line" in html
    assert old.get_absolute_url() in html and live.get_absolute_url() in html
    assert "2 runs" in html
    # The list links to it; the incidents table is the same partial on both pages.
    listing = client_as(member).get(reverse("hosts")).content.decode()
    assert reverse("host-detail", args=[sim_host.name]) in listing
    assert "MemAvailable 3.1 GB is below the warn line" in listing


def test_memory_below_a_line_says_so(client_as, member, sim_host):
    warn, act = guard_lines_gb(sim_host)
    for available, words in (((warn + act) / 2, "below the warn line"),
                             (act / 2, "below the stop line")):  # fmt: skip
        Host.objects.filter(pk=sim_host.pk).update(
            agent_seen_at=timezone.now(),
            agent_sample={"mem_total": 128 * GB, "mem_available": int(available * GB)},
        )
        html = client_as(member).get(reverse("host-detail", args=[sim_host.name])).content.decode()
        assert words in html


def test_a_host_without_agent_or_runs_still_renders(client_as, member, sim_host):
    html = client_as(member).get(reverse("host-detail", args=[sim_host.name])).content.decode()
    assert "not reporting" in html and "No runs on" in html and "No incidents" in html


def test_unknown_hosts_are_404_and_outsiders_403(client_as, member, outsider, sim_host):
    assert client_as(member).get("/hosts/no-such-host/").status_code == 404
    assert client_as(outsider).get(reverse("host-detail", args=[sim_host.name])).status_code == 403


def test_the_page_gives_the_largest_utilization_a_start_can_ask_for_now(client_as, member,
                                                                        sim_host):  # fmt: skip
    """vLLM's start gate (free memory at start ≥ utilization × CUDA total; on a GB10 free is
    MemAvailable) and the panel's (the freeze margin kept, never above 0.90)."""
    from decimal import Decimal

    from sparkdomain.planner.utilization import startable_now
    from sparkdomain.spark import GIB

    assert startable_now(int(100 * GIB), 121.69, 3.0) == (Decimal("0.79"), Decimal("0.82"))
    assert startable_now(int(121 * GIB), 121.69, 3.0)[0] == Decimal("0.90")  # the 0.90 cap
    assert startable_now(int(2 * GB), 121.69, 3.0)[0] == Decimal("0")
    Host.objects.filter(pk=sim_host.pk).update(
        agent_seen_at=timezone.now(),
        agent_sample={"mem_total": 128 * GB, "mem_available": int(100 * GIB)},
    )
    html = client_as(member).get(reverse("host-detail", args=[sim_host.name])).content.decode()
    row = html.split('data-testid="startable-now"')[1].split("</tr>")[0]
    gate = startable_now(int(100 * GIB), Host.objects.get(pk=sim_host.pk).cuda_visible_gib, 3.0)
    assert f"<td>{gate[0]}</td>" in row and f"refuses above {gate[1]}" in row

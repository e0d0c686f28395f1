"""The panel's own /metrics: Prometheus text, for allowed scrapers only."""

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apps.hosts.models import Host
from apps.telemetry.models import Incident

pytestmark = pytest.mark.django_db


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_loopback_scrapes_without_login_and_gets_host_and_run_gauges(sim_host, settings):
    Host.objects.filter(pk=sim_host.pk).update(
        agent_seen_at=timezone.now(),
        agent_sample={"mem_available": 5 * 10**9, "mem_total": 128 * 10**9},
    )
    Incident.objects.create(host=sim_host, kind="act", at=timezone.now(), message="x")
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    families = _families(response.content.decode())
    memory = {
        s.labels["host"]: s.value
        for s in families["sparkpanel_host_memory_available_bytes"].samples
    }
    assert memory[sim_host.name] == 5e9
    assert {s.labels["state"] for s in families["sparkpanel_runs"].samples} >= {"ready", "loading"}
    acts = [s for s in families["sparkpanel_incidents"].samples
            if s.labels == {"host": sim_host.name, "kind": "act"} and s.name.endswith("_total")]  # fmt: skip
    assert acts[0].value == 1


def test_other_networks_are_refused_and_a_token_is_required_when_set(settings):
    assert Client(REMOTE_ADDR="192.0.2.7").get("/metrics").status_code == 403
    settings.METRICS_TOKEN = "s3cret-token"
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403
    ok = Client(REMOTE_ADDR="192.0.2.7").get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert ok.status_code == 200
    bad = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong")
    assert bad.status_code == 403

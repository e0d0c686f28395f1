"""The panel notices a Spark whose host agent or worker went silent: one incident per
episode (a real Redis keeps the episode), a new one after it came back and went silent
again, nothing for a host whose agent never ran."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.guard.tasks import check_hosts
from apps.hosts.models import Host
from apps.telemetry.models import Incident

pytestmark = [pytest.mark.django_db, pytest.mark.services]


def _seen(host, agent_ago=None, worker_ago=None):
    now = timezone.now()
    Host.objects.filter(pk=host.pk).update(
        agent_seen_at=now - timedelta(seconds=agent_ago) if agent_ago is not None else None,
        last_heartbeat=now - timedelta(seconds=worker_ago) if worker_ago is not None else None,
    )


def test_a_silent_agent_is_one_incident_per_episode(redis_url, settings, sim_host):
    settings.REDIS_URL = redis_url
    _seen(sim_host, agent_ago=None, worker_ago=None)  # never ran: not an alert
    assert check_hosts() == []
    _seen(sim_host, agent_ago=2, worker_ago=10)
    assert check_hosts() == []
    _seen(sim_host, agent_ago=75, worker_ago=10)
    (first,) = check_hosts()
    assert first.kind == Incident.Kind.ALERT and first.evidence == {"rule": "agent_offline"}
    assert first.message.startswith(f"The host agent on {sim_host.name} stopped reporting 75 s")
    assert check_hosts() == []  # the same episode
    _seen(sim_host, agent_ago=1, worker_ago=10)  # back
    assert check_hosts() == []
    _seen(sim_host, agent_ago=90, worker_ago=200)  # silent again, and the worker too
    rules = sorted(i.evidence["rule"] for i in check_hosts())
    assert rules == ["agent_offline", "worker_offline"]
    assert Incident.objects.filter(host=sim_host).count() == 3

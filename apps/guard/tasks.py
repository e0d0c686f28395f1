"""The guard's periodic check from the panel's side (beat, every 30 s): a Spark whose host
agent or worker stopped reporting. The agent cannot report its own silence, so the panel
does: one incident per episode (kind alert, reaching e-mail subscribers of telemetry alerts
and webhooks), and another once it was back and went silent again."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.core.redisconn import shared_client
from apps.hosts.models import Host
from apps.telemetry.models import Incident
from apps.telemetry.signals import incident_recorded

log = logging.getLogger("sparkpanel.guard")

AGENT_SILENT = timedelta(seconds=60)
WORKER_SILENT = timedelta(seconds=120)
KEY = "sparkpanel:guard:silent:{what}:{host}"  # set while an episode lasts


def _silences(host: Host, now) -> dict[str, str]:
    """What is silent on `host` now, in words (only what once reported: a host whose agent
    never ran is not an alert — its page says how to start one)."""
    found = {}
    if host.agent_seen_at and now - host.agent_seen_at > AGENT_SILENT:
        found["agent"] = (f"the host agent on {host.name} stopped reporting "
                          f"{int((now - host.agent_seen_at).total_seconds())} s ago: no memory "
                          "watchdog and no hang detection there")  # fmt: skip
    if host.last_heartbeat and now - host.last_heartbeat > WORKER_SILENT:
        found["worker"] = (f"the worker of {host.name} stopped reporting "
                           f"{int((now - host.last_heartbeat).total_seconds())} s ago: runs there "
                           "cannot start or stop and its benchmark jobs wait")  # fmt: skip
    return found


def check_hosts() -> list[Incident]:
    client = shared_client(settings.REDIS_URL, timeout=2)
    now = timezone.now()
    recorded = []
    for host in Host.objects.in_service():  # a retired Spark is expected to fall silent
        silent = _silences(host, now)
        for what in ("agent", "worker"):
            key = KEY.format(what=what, host=host.name)
            if what not in silent:
                client.delete(key)  # back: a later silence is a new episode
                continue
            if not client.set(key, "1", nx=True):
                continue  # this episode was reported
            incident = Incident.objects.create(
                host=host, kind=Incident.Kind.ALERT, at=now, message=silent[what][0].upper()
                + silent[what][1:], evidence={"rule": f"{what}_offline"},
            )  # fmt: skip
            incident_recorded.send(sender=Incident, incident=incident)
            log.warning("GUARD %s", incident.message)
            recorded.append(incident)
    return recorded


@shared_task(name="guard.check_hosts")
def check_hosts_task() -> int:
    return len(check_hosts())

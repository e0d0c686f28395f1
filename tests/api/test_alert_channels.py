"""Every alert, through every channel: each event the guard and the panel raise reaches a
subscriber's mailbox on a real local SMTP server (aiosmtpd) once, and a real local receiver
once in each webhook format (SparkPanel JSON, Slack, Discord, Teams, ntfy)."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from apps.api.models import EmailAlerts, Webhook
from apps.benchmarks.models import J, Job, Suite
from apps.benchmarks.selectors import suite_plan
from apps.benchmarks.signals import job_finished
from apps.runs.models import Run, RunState
from apps.telemetry.models import Incident
from apps.telemetry.signals import incident_recorded
from tests.api.test_webhooks import Receiver

pytestmark = pytest.mark.django_db

FORMATS = ("generic", "slack", "discord", "teams", "ntfy")


def _incident(host, kind, message):
    incident = Incident.objects.create(host=host, kind=kind, at=timezone.now(), message=message)
    incident_recorded.send(sender=Incident, incident=incident)


def _run(host, recipe, user, state=RunState.WARMING):
    return Run.objects.create(recipe=recipe, host=host, state=state, port=9, started_by=user)


# (e-mail event, webhook event, what raises it, words the message must carry)
CASES = {
    "watchdog.kill": ("incident", lambda h, r, u: _incident(h, "act", "MemAvailable 2.1 GiB"),
                      "MemAvailable 2.1 GiB"),
    "watchdog.warn": ("incident", lambda h, r, u: _incident(h, "warn", "MemAvailable 3.5 GiB"),
                      "MemAvailable 3.5 GiB"),
    "run.hung": ("incident", lambda h, r, u: _incident(h, "hang", "Run 4 hung: no token"),
                 "Run 4 hung: no token"),
    "telemetry.alert": ("incident", lambda h, r, u: _incident(h, "alert", "KV cache at 97 %"),
                        "KV cache at 97 %"),
    "run.failed": ("run.failed", lambda h, r, u: _run(h, r, u, RunState.READY).mark_failed(
        "exited with code 1"), "failed: exited with code 1"),
    "run.ready": ("run.ready", lambda h, r, u: _run(h, r, u).transition(RunState.READY),
                  "is ready"),
}  # fmt: skip


def _job_done(host, recipe, user):
    suite = Suite.objects.create(name="all channels", scenarios=[{"name": "s",
                                 "prompt_tokens": 8, "output_tokens": 2}], repetitions=1)  # fmt: skip
    job = Job.objects.create(suite=suite, recipe=recipe, host=host, queued_by=user,
                             plan=suite_plan(suite), state=J.DONE)  # fmt: skip
    job_finished.send(sender=Job, job=job)


CASES["job.finished"] = ("job.finished", _job_done, ": done")


@pytest.mark.parametrize("event", list(CASES))
def test_each_alert_reaches_the_mailbox_and_every_webhook_format_once(
    event,
    smtp,
    eager,
    settings,
    sim_host,
    qwen,
    member,
    django_capture_on_commit_callbacks,
):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.WEBHOOK_RETRY_DELAYS = [0]
    hook_event, raise_it, words = CASES[event]
    member.email = "mia@test.lan"
    member.save()
    EmailAlerts.objects.create(user=member, events=[event])
    receiver = Receiver()
    try:
        for fmt in FORMATS:
            Webhook.objects.create(user=member, url=f"{receiver.url}/{fmt}", secret="s",
                                   events=[hook_event], format=fmt)  # fmt: skip
        with django_capture_on_commit_callbacks(execute=True):
            raise_it(sim_host, qwen, member)
    finally:
        receiver.close()
    assert [rcpt for rcpt, _ in smtp.messages] == [["mia@test.lan"]]
    assert words in smtp.messages[0][1].get_payload(decode=True).decode()
    got = {r["path"].rsplit("/", 1)[1]: r for r in receiver.requests}
    assert sorted(got) == sorted(FORMATS) and len(receiver.requests) == len(FORMATS)
    assert json.loads(got["generic"]["body"])["event"] == hook_event
    assert words in json.loads(got["slack"]["body"])["text"]
    assert words in json.loads(got["discord"]["body"])["content"]
    card = json.loads(got["teams"]["body"])["attachments"][0]["content"]
    assert words in card["body"][1]["text"]
    assert words in got["ntfy"]["body"].decode()


def test_every_format_the_model_offers_has_a_renderer():
    from apps.api.webhooks import formats

    assert [value for value, _label in formats.CHOICES] == [
        formats.GENERIC, formats.SLACK, formats.DISCORD, formats.TEAMS, formats.NTFY
    ]  # fmt: skip
    for value, _label in formats.CHOICES:
        body, _headers = formats.render(value, "ping", {"event": "ping"}, b"{}")
        assert body

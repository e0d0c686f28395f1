"""E-mail alerts through Django's SMTP backend to a real local SMTP server (aiosmtpd): the
events a user chose reach them, once per incident, and nobody else; a finished job reaches
its owner only; the profile page saves the choice and sends a test now, saying what
happened when it cannot."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from apps.api.models import EmailAlerts
from apps.telemetry.models import Incident
from apps.telemetry.signals import incident_recorded
from tests.api.conftest import free_port

pytestmark = pytest.mark.django_db


def _subscribe(user, *events, email="x@test.lan"):
    user.email = email
    user.save()
    EmailAlerts.objects.create(user=user, events=list(events))


def _incident(host, kind="act", message="MemAvailable 2.6 GiB is below the 2.8 GiB act threshold"):
    incident = Incident.objects.create(host=host, kind=kind, at=timezone.now(), message=message,
                                       action="killed run 4 (Qwen)")  # fmt: skip
    incident_recorded.send(sender=Incident, incident=incident)
    return incident


def test_an_incident_reaches_each_subscriber_once_and_no_one_else(
    smtp, eager, sim_host, member, operator, admin_user, django_capture_on_commit_callbacks
):
    _subscribe(member, "watchdog.kill", email="mia@test.lan")
    _subscribe(operator, "run.hung", email="otto@test.lan")  # another event
    _subscribe(admin_user, "watchdog.kill", email="")  # no address
    with django_capture_on_commit_callbacks(execute=True):
        _incident(sim_host, "act")
    assert [rcpt for rcpt, _ in smtp.messages] == [["mia@test.lan"]]
    (_, message), = smtp.messages  # fmt: skip
    assert (
        message["Subject"] == f"[SparkPanel] Run stopped by the memory watchdog on {sim_host.name}"
    )
    body = message.get_payload(decode=True).decode()
    assert "MemAvailable 2.6 GiB is below the 2.8 GiB act threshold — killed run 4 (Qwen)" in body
    with django_capture_on_commit_callbacks(execute=True):
        _incident(sim_host, "hang", message="Run 4 (Qwen) hung: 1 request(s) running")
    assert [rcpt for rcpt, _ in smtp.messages][1:] == [["otto@test.lan"]]
    assert smtp.messages[1][1]["Subject"] == f"[SparkPanel] Run hung on {sim_host.name}"


def test_a_finished_job_reaches_its_owner_only(
    smtp, eager, sim_host, qwen, member, operator, django_capture_on_commit_callbacks
):
    from apps.benchmarks.models import J, Job, Suite
    from apps.benchmarks.selectors import suite_plan
    from apps.benchmarks.signals import job_finished

    _subscribe(member, "job.finished", email="mia@test.lan")
    _subscribe(operator, "job.finished", email="otto@test.lan")
    suite = Suite.objects.create(name="mail", scenarios=[{"name": "s", "prompt_tokens": 8,
                                 "output_tokens": 2}], repetitions=1)  # fmt: skip
    job = Job.objects.create(suite=suite, recipe=qwen, host=sim_host, queued_by=member,
                             plan=suite_plan(suite), state=J.DONE)  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        job_finished.send(sender=Job, job=job)
    assert [rcpt for rcpt, _ in smtp.messages] == [["mia@test.lan"]]
    assert smtp.messages[0][1]["Subject"] == f"[SparkPanel] Benchmark job {job.pk} done"


def test_the_profile_page_saves_the_choice_and_sends_a_test(smtp, member):
    member.email = "mia@test.lan"
    member.save()
    client = Client()
    client.force_login(member)
    page = client.get("/accounts/profile/")
    assert b"E-mail alerts" in page.content and b"mia@test.lan" in page.content
    saved = client.post("/accounts/profile/email-alerts/",
                        {"events": ["watchdog.kill", "job.finished"]})  # fmt: skip
    assert saved.status_code == 302
    assert EmailAlerts.objects.get(user=member).events == ["watchdog.kill", "job.finished"]
    bad = client.post("/accounts/profile/email-alerts/", {"events": ["everything"]})
    assert bad.status_code == 400
    assert EmailAlerts.objects.get(user=member).events == ["watchdog.kill", "job.finished"]
    tested = client.post("/accounts/profile/email-alerts/test/", follow=True)
    assert b"Sent to mia@test.lan." in tested.content
    assert smtp.messages[-1][0] == ["mia@test.lan"]
    assert smtp.messages[-1][1]["Subject"] == "[SparkPanel] test"


def test_a_test_e_mail_that_cannot_go_says_why(member, settings):
    client = Client()
    client.force_login(member)
    none = client.post("/accounts/profile/email-alerts/test/", follow=True)
    assert b"no e-mail address" in none.content
    member.email = "mia@test.lan"
    member.save()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", free_port(), 2
    down = client.post("/accounts/profile/email-alerts/test/", follow=True)
    assert down.status_code == 200 and b"Not sent: ConnectionRefusedError" in down.content


def test_a_failed_run_reaches_subscribers_and_a_ready_one_its_starter(
    smtp, eager, sim_host, qwen, member, operator, django_capture_on_commit_callbacks
):
    from apps.runs.models import Run, RunState

    _subscribe(member, "run.failed", "run.ready", email="mia@test.lan")
    _subscribe(operator, "run.ready", email="otto@test.lan")
    with django_capture_on_commit_callbacks(execute=True):
        run = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.WARMING, port=9,
                                 started_by=operator)  # fmt: skip
        run.transition(RunState.READY)
    assert [rcpt for rcpt, _ in smtp.messages] == [["otto@test.lan"]]  # the starter only
    assert smtp.messages[0][1]["Subject"] == f"[SparkPanel] Run {run.pk} ready on {sim_host.name}"
    with django_capture_on_commit_callbacks(execute=True):
        run.mark_failed("the server exited with code 1 while ready")
    assert [rcpt for rcpt, _ in smtp.messages][1:] == [["mia@test.lan"]]
    body = smtp.messages[1][1].get_payload(decode=True).decode()
    assert "failed: the server exited with code 1 while ready" in body

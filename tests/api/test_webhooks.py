"""Outgoing webhooks: signed POSTs to a real HTTP receiver on 127.0.0.1, retries with
backoff, what enqueues a delivery (a job finishing, an incident), and the profile page."""

from __future__ import annotations

import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client
from django.utils import timezone

from apps.api import webhooks
from apps.api.models import Webhook, WebhookDelivery
from apps.api.tasks import deliver
from apps.benchmarks.models import J, Job, Result, Suite
from apps.benchmarks.selectors import suite_plan
from apps.telemetry.models import Incident

pytestmark = pytest.mark.django_db

SECRET = "s3cret-for-tests"


class Receiver:
    """A real HTTP server in a thread: records each request; answers the queued status
    codes in turn (then 200)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.codes: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                code = receiver.codes.pop(0) if receiver.codes else 200
                self.send_response(code)
                if code in (301, 302):
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """The personas' password hashing is most of these tests' time otherwise."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def loopback_allowed(settings):
    """The receivers here listen on 127.0.0.1, which deliveries refuse unless an admin
    allows it (tests/security/test_webhook_targets.py proves the refusals)."""
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def scheduled(monkeypatch, settings):
    """Retries are real Celery tasks run eagerly (no broker, no worker); the delays come
    from settings and are recorded instead of waited for (eager mode ignores countdown)."""
    from sparkpanel.celery import app

    settings.WEBHOOK_RETRY_DELAYS = [0, 0, 0]
    saved = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    calls: list[tuple[int, float]] = []
    original = webhooks.delivery._schedule

    def spy(delivery_id, countdown):
        calls.append((delivery_id, countdown))
        original(delivery_id, countdown)

    monkeypatch.setattr(webhooks.delivery, "_schedule", spy)
    yield calls
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved


@pytest.fixture
def quick_suite(db):
    return Suite.objects.create(
        name="webhook quick", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 8}],
        repetitions=1, sweep_levels=[1, 2], requests_per_level=2,
    )  # fmt: skip


def _hook(user, url="http://127.0.0.1:9/hook", events=("job.finished",), **kw) -> Webhook:
    return Webhook.objects.create(user=user, url=url, secret=SECRET, events=list(events), **kw)


def _delivery(hook, payload=None, event="ping") -> WebhookDelivery:
    return WebhookDelivery.objects.create(
        webhook=hook, event=event, payload=payload or {"event": event, "n": 1, "a": "é"}
    )


# --- signing and sending -------------------------------------------------------------------


def test_a_delivery_is_signed_json_that_verifies_only_with_its_secret(receiver, member):
    hook = _hook(member, receiver.url)
    delivery = _delivery(hook)
    deliver.apply(args=[delivery.pk])
    [req] = receiver.requests
    h = req["headers"]
    assert h["Content-Type"] == "application/json"
    assert h["X-SparkPanel-Event"] == "ping"
    assert h["X-SparkPanel-Delivery"] == str(delivery.pk)
    assert abs(int(h["X-SparkPanel-Timestamp"]) - timezone.now().timestamp()) < 60
    body = req["body"]
    assert body == b'{"a":"\\u00e9","event":"ping","n":1}'  # compact, sorted keys
    assert json.loads(body) == delivery.payload
    ts, sig = h["X-SparkPanel-Timestamp"], h["X-SparkPanel-Signature"]
    assert sig.startswith("sha256=") and len(sig) == 7 + 64
    assert webhooks.verify_signature(SECRET, ts, body, sig)
    assert webhooks.verify_signature(SECRET, ts, body.decode(), sig)
    assert not webhooks.verify_signature("another-secret", ts, body, sig)
    assert not webhooks.verify_signature(SECRET, ts, body.replace(b"1", b"2"), sig)
    assert not webhooks.verify_signature(SECRET, str(int(ts) + 1), body, sig)
    assert not webhooks.verify_signature(SECRET, ts, body, "")
    assert SECRET not in json.dumps(h) and SECRET.encode() not in body
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.status_code, delivery.error) == (
        "delivered", 1, 200, "")  # fmt: skip
    assert delivery.last_attempt_at is not None


def test_a_500_is_retried_with_the_configured_backoff_and_then_delivered(
    receiver, member, scheduled
):
    receiver.codes = [500]
    delivery = _delivery(_hook(member, receiver.url))
    deliver.apply(args=[delivery.pk])
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.status_code, delivery.error) == (
        "delivered", 2, 200, "")  # fmt: skip
    assert scheduled == [(delivery.pk, 0)]
    assert len(receiver.requests) == 2
    ids = {r["headers"]["X-SparkPanel-Delivery"] for r in receiver.requests}
    assert ids == {str(delivery.pk)}  # the same id on a retry: receivers can deduplicate


def test_the_schedule_comes_from_settings_and_ends_in_failed(receiver, member, scheduled, settings):
    settings.WEBHOOK_RETRY_DELAYS = [1, 2, 3]  # recorded, not waited for (eager mode)
    receiver.codes = [500, 502, 503, 418]
    delivery = _delivery(_hook(member, receiver.url))
    deliver.apply(args=[delivery.pk])
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.status_code) == ("failed", 4, 418)
    assert delivery.error.startswith("HTTP 418")
    assert [countdown for _, countdown in scheduled] == [1, 2, 3]
    assert len(receiver.requests) == 4
    assert deliver.apply(args=[delivery.pk]).get() is None  # given up: never sent again
    assert len(receiver.requests) == 4


def test_redirects_and_refused_connections_are_failures_not_followed(
    receiver, member, scheduled, settings
):
    settings.WEBHOOK_RETRY_DELAYS = []
    receiver.codes = [302]
    delivery = _delivery(_hook(member, receiver.url))
    deliver.apply(args=[delivery.pk])
    delivery.refresh_from_db()
    assert (delivery.state, delivery.status_code) == ("failed", 302)
    assert "not followed" in delivery.error
    assert [r["path"] for r in receiver.requests] == ["/hook"]

    closed = Receiver()
    closed.close()  # nothing listens there any more
    delivery = _delivery(_hook(member, closed.url))
    deliver.apply(args=[delivery.pk])
    delivery.refresh_from_db()
    assert delivery.state == "failed" and delivery.status_code is None
    assert delivery.error and SECRET not in delivery.error


def test_deliveries_go_to_the_light_default_queue_never_a_host_queue(monkeypatch, settings):
    sent = []
    monkeypatch.setattr(deliver, "apply_async", lambda **kw: sent.append(kw), raising=False)
    webhooks.delivery._schedule(41, 10)
    assert sent == [{"args": [41], "countdown": 10, "queue": "default"}]
    del settings.WEBHOOK_RETRY_DELAYS
    assert webhooks.retry_delays() == [10, 30, 90, 270, 810]  # six attempts in all


# --- what enqueues a delivery --------------------------------------------------------------


@pytest.fixture
def recorded(monkeypatch):
    """Deliveries scheduled after commit, recorded instead of sent to the broker."""
    calls: list[int] = []
    monkeypatch.setattr(webhooks.delivery, "_schedule", lambda pk, countdown: calls.append(pk))
    return calls


def test_a_finished_job_notifies_only_its_owners_subscribed_webhooks(
    member, operator, sim_host, qwen, quick_suite, recorded, django_capture_on_commit_callbacks
):
    mine = _hook(member, events=["job.finished", "incident"])
    _hook(member, events=["incident"])  # not subscribed
    _hook(member, active=False)  # paused
    _hook(operator)  # someone else's
    job = Job.objects.create(suite=quick_suite, recipe=qwen, host=sim_host, queued_by=member,
                             plan=suite_plan(quick_suite))  # fmt: skip
    for c, ttft in ((1, 0.5), (2, 3.0)):  # level 2 misses the 2 s TTFT SLO
        Result.objects.create(job=job, kind="sweep", scenario=f"c{c}", prompt_tokens=200,
                              output_tokens=64, concurrency=c, ok=2, ttft_p95_s=ttft,
                              decode_tps_p50=40.0)  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        assert job.move(J.QUEUED, J.RUNNING, started_at=timezone.now())
    assert not WebhookDelivery.objects.exists() and recorded == []  # not finished yet
    with django_capture_on_commit_callbacks(execute=True):
        assert job.move(J.RUNNING, J.DONE, finished_at=timezone.now())
        assert not job.move(J.RUNNING, J.DONE)  # a second move does nothing
    [delivery] = WebhookDelivery.objects.all()
    assert delivery.webhook == mine and delivery.event == "job.finished"
    assert recorded == [delivery.pk]  # sent once, on commit
    payload = delivery.payload
    assert payload["event"] == "job.finished"
    assert payload["job"]["id"] == job.pk and payload["job"]["state"] == "done"
    assert payload["job"]["queued_by"] == member.username
    assert payload["job"]["host"] == sim_host.name
    assert payload["job"]["url"] == f"/benchmarks/jobs/{job.pk}/"
    assert set(payload) == {"event", "job", "summary", "capacity"}
    assert payload["summary"]["capacity_users"] == 1 == payload["capacity"]["users"]
    assert payload["summary"]["capacity_text"].startswith("This recipe serves 1 concurrent user")
    assert SECRET not in json.dumps(payload)


def test_a_queued_job_cancelled_notifies_too(
    member, sim_host, qwen, quick_suite, recorded, django_capture_on_commit_callbacks, settings
):
    from apps.benchmarks.services import job_cancel

    settings.SITE_URL = "https://panel.example/"
    _hook(member)
    job = Job.objects.create(suite=quick_suite, recipe=qwen, host=sim_host, queued_by=member)
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job=job, user=member)
    [delivery] = WebhookDelivery.objects.all()
    assert delivery.payload["job"]["state"] == "cancelled"
    assert delivery.payload["job"]["url"] == f"https://panel.example/benchmarks/jobs/{job.pk}/"
    assert len(recorded) == 1


def test_an_incident_notifies_every_incident_subscriber(
    member, operator, sim_host, recorded, django_capture_on_commit_callbacks
):
    a = _hook(member, events=["incident"])
    b = _hook(operator, events=["job.finished", "incident"])
    _hook(operator, events=["job.finished"])
    incident = Incident.objects.create(host=sim_host, kind=Incident.Kind.ACT, at=timezone.now(),
                                       message="MemAvailable 1.2 GiB", action="killed run 7")  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        created = webhooks.incident_happened(incident)
    assert {d.webhook for d in created} == {a, b}
    assert len(recorded) == 2
    payload = created[0].payload
    assert payload["event"] == "incident"
    assert payload["incident"] == {
        "id": incident.pk, "host": sim_host.name, "kind": "act", "message": "MemAvailable 1.2 GiB",
        "action": "killed run 7", "run": None, "recipe": "", "at": incident.at.isoformat(),
        "url": "/hosts/",
    }  # fmt: skip


def test_the_host_agent_hook_enqueues_incidents(
    member, sim_host, recorded, django_capture_on_commit_callbacks
):
    from apps.guard.agent import HostAgent

    _hook(member, events=["incident"])
    agent = HostAgent.__new__(HostAgent)  # only what _incident needs
    agent.host = sim_host
    agent.watchdog = type("W", (), {"history": staticmethod(list)})()
    with django_capture_on_commit_callbacks(execute=True):
        incident = agent._incident(Incident.Kind.WARN, "memory low", None)
    [delivery] = WebhookDelivery.objects.all()
    assert delivery.payload["incident"]["id"] == incident.pk and len(recorded) == 1


def test_a_webhook_problem_never_breaks_the_job_move(
    member, sim_host, qwen, quick_suite, monkeypatch
):
    _hook(member)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(webhooks.delivery, "_create_delivery", broken)
    job = Job.objects.create(suite=quick_suite, recipe=qwen, host=sim_host, queued_by=member)
    assert job.move(J.QUEUED, J.FAILED, finished_at=timezone.now(), error="x")
    assert Job.objects.get(pk=job.pk).state == J.FAILED


# --- the profile page ------------------------------------------------------------------------


def test_adding_a_webhook_shows_its_secret_once(client_as, member, recorded):
    client = client_as(member, enforce_csrf_checks=True)
    page = client.get("/accounts/profile/")
    html = page.content.decode()
    assert 'id="webhooks"' in html and "X-SparkPanel-Signature" in html
    assert 'action="/accounts/profile/webhooks/"' in html
    token = page.cookies["csrftoken"].value
    response = client.post(
        "/accounts/profile/webhooks/",
        {"url": "https://ci.example/hook", "events": ["job.finished", "incident"],
         "csrfmiddlewaretoken": token},
        follow=True,
    )  # fmt: skip
    [(url, status)] = response.redirect_chain
    assert status == 302 and re.fullmatch(r"/accounts/profile/\?shown=[\w-]+#webhooks", url)
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    hook = Webhook.objects.get(user=member)
    assert hook.events == ["job.finished", "incident"] and len(hook.secret) >= 40
    assert hook.secret in response.content.decode()
    again = client.get("/accounts/profile/").content.decode()
    assert hook.secret not in again and "https://ci.example/hook" in again
    assert (
        client.post("/accounts/profile/webhooks/", {"url": "https://x.example/"}).status_code == 403
    )


@pytest.mark.parametrize(
    "url, error",
    [
        ("ftp://x.example/hook", "Only http:// and https://"),
        ("https://user:pw@x.example/hook", "No credentials"),
        ("https://x.example/" + "a" * 500, "at most 500"),
        ("javascript:alert(1)", "Enter a valid URL"),
    ],
)
def test_bad_urls_are_refused(client_as, member, url, error):
    response = client_as(member).post(
        "/accounts/profile/webhooks/", {"url": url, "events": ["incident"]}
    )
    assert response.status_code == 400
    assert error in response.content.decode()
    assert not Webhook.objects.exists()


def test_no_event_is_refused(client_as, member):
    response = client_as(member).post("/accounts/profile/webhooks/", {"url": "https://x.example/"})
    assert response.status_code == 400 and "at least one event" in response.content.decode()


def test_users_only_see_and_change_their_own_webhooks(
    client_as, member, operator, recorded, django_capture_on_commit_callbacks
):
    theirs = _hook(operator, url="https://operator.example/secret-path")
    _delivery(theirs)
    client = client_as(member)
    html = client.get("/accounts/profile/").content.decode()
    assert "operator.example" not in html
    assert client.post(f"/accounts/profile/webhooks/{theirs.pk}/delete/").status_code == 404
    assert client.post(f"/accounts/profile/webhooks/{theirs.pk}/test/").status_code == 404
    assert Webhook.objects.filter(pk=theirs.pk).exists()
    assert client.get(f"/accounts/profile/webhooks/{theirs.pk}/delete/").status_code == 405

    mine = _hook(member, url="https://member.example/hook")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/accounts/profile/webhooks/{mine.pk}/test/")
    assert response.status_code == 302 and response["Location"].endswith("#webhooks")
    [ping] = WebhookDelivery.objects.filter(webhook=mine)
    assert ping.event == "ping" and recorded == [ping.pk]
    html = client.get("/accounts/profile/").content.decode()
    assert 'id="webhook-deliveries"' in html and "Pending" in html
    assert html.count("csrfmiddlewaretoken") >= 4  # token form, add, test, delete
    assert SECRET not in html  # never shown after creation
    assert client.post(f"/accounts/profile/webhooks/{mine.pk}/delete/").status_code == 302
    assert not Webhook.objects.filter(pk=mine.pk).exists()
    assert not WebhookDelivery.objects.filter(webhook_id=mine.pk).exists()


def test_anonymous_users_are_sent_to_login(client):
    response = client.post("/accounts/profile/webhooks/", {"url": "https://x.example/"})
    assert response.status_code == 302 and "/login/" in response["Location"]


# --- the secret at rest (issue 17, class 5) --------------------------------------------------


def _stored_secret(pk: int) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM api_webhook WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_the_secret_is_stored_encrypted_and_the_one_shown_verifies_deliveries(
    client_as, member, receiver, recorded
):
    import re

    response = client_as(member).post(
        "/accounts/profile/webhooks/", {"url": receiver.url, "events": ["incident"]}, follow=True
    )
    shown = re.search(r'data-testid="new-webhook-secret">([^<]+)<', response.content.decode())[1]
    hook = Webhook.objects.get(user=member)
    stored = _stored_secret(hook.pk)
    assert stored.startswith("enc1:") and shown not in stored and len(shown) >= 40
    assert hook.secret == shown  # read back in clear through the model
    assert shown not in json.dumps(list(Webhook.objects.values_list("url", "events")))
    deliver.apply(args=[_delivery(hook).pk])
    [req] = receiver.requests
    h = req["headers"]
    assert webhooks.verify_signature(
        shown, h["X-SparkPanel-Timestamp"], req["body"], h["X-SparkPanel-Signature"]
    )


def test_the_migration_encrypts_clear_secrets_and_going_back_decrypts_them(member):
    import importlib
    from types import SimpleNamespace

    from django.db import connection

    migration = importlib.import_module("apps.api.migrations.0002_webhook_secret_encrypted")
    hook = _hook(member)
    with connection.cursor() as cursor:  # a row as 0001 stored it
        cursor.execute("UPDATE api_webhook SET secret = %s WHERE id = %s", [SECRET, hook.pk])
    assert _stored_secret(hook.pk) == SECRET
    # What the functions use of the schema editor (a real one needs SQLite's foreign key
    # checks off, outside the test's transaction).
    editor = SimpleNamespace(connection=connection)
    migration.encrypt_existing(None, editor)
    stored = _stored_secret(hook.pk)
    assert stored.startswith("enc1:") and SECRET not in stored
    assert Webhook.objects.get(pk=hook.pk).secret == SECRET
    migration.encrypt_existing(None, editor)  # twice: nothing is encrypted twice
    assert Webhook.objects.get(pk=hook.pk).secret == SECRET
    migration.decrypt_existing(None, editor)
    assert _stored_secret(hook.pk) == SECRET


def test_a_key_rotation_keeps_secrets_and_a_lost_key_fails_deliveries_cleanly(
    member, receiver, settings, scheduled
):
    from django.core.management import call_command

    settings.FIELD_ENCRYPTION_KEY = ["old-key-" + "x" * 32]
    hook = _hook(member, receiver.url)
    before = _stored_secret(hook.pk)
    settings.FIELD_ENCRYPTION_KEY = ["new-key-" + "y" * 32, "old-key-" + "x" * 32]
    assert Webhook.objects.get(pk=hook.pk).secret == SECRET  # the old key still decrypts
    call_command("rotate_field_key", stdout=open(os.devnull, "w"))  # noqa: SIM115
    assert _stored_secret(hook.pk) != before
    settings.FIELD_ENCRYPTION_KEY = ["new-key-" + "y" * 32]
    assert Webhook.objects.get(pk=hook.pk).secret == SECRET  # re-encrypted with the new one

    settings.FIELD_ENCRYPTION_KEY = ["a-key-nobody-had"]
    delivery = _delivery(Webhook.objects.get(pk=hook.pk))
    deliver.apply(args=[delivery.pk])
    delivery.refresh_from_db()
    assert delivery.state == "failed" and "cannot be decrypted" in delivery.error
    assert receiver.requests == []  # never signed with a wrong key


def test_without_a_field_key_the_secret_key_derives_it(member, settings):
    settings.FIELD_ENCRYPTION_KEY = []
    hook = _hook(member)
    settings.SECRET_KEY, old = "another-secret-key-" + "z" * 40, settings.SECRET_KEY
    assert Webhook.objects.get(pk=hook.pk).secret == ""  # unreadable without the old key
    settings.SECRET_KEY_FALLBACKS = [old]
    assert Webhook.objects.get(pk=hook.pk).secret == SECRET


# --- formats: Slack, Discord, Teams, ntfy ----------------------------------------------------


def _incident_payload(kind="hang"):
    return {"event": "incident", "incident": {
        "id": 7, "host": "spark-1", "kind": kind, "message": "Run 3 (Qwen) hung: 1 request(s) "
        "running and no token generated for 120 s", "action": "restarting it (restart 1 of 1)",
        "run": 3, "recipe": "Qwen", "at": "2026-12-06T05:00:00+00:00",
        "url": "https://panel.lan/runs/3/"}}  # fmt: skip


@pytest.mark.parametrize("fmt", ["slack", "discord", "teams", "ntfy"])
def test_each_chat_format_reaches_a_receiver_as_that_service_reads_it(receiver, member, fmt):
    hook = _hook(member, receiver.url, events=("incident",), format=fmt)
    delivery = _delivery(hook, _incident_payload(), event="incident")
    deliver.apply(args=[delivery.pk])
    [req] = receiver.requests
    h, body = req["headers"], req["body"]
    line = ("spark-1: Run 3 (Qwen) hung: 1 request(s) running and no token generated for 120 s"
            " — restarting it (restart 1 of 1)")  # fmt: skip
    if fmt == "ntfy":
        assert h["Content-Type"].startswith("text/plain") and body.decode() == line
        assert (h["Title"], h["Priority"], h["Click"]) == (
            "Run hung on spark-1",
            "high",
            "https://panel.lan/runs/3/",
        )
        assert "sparkpanel" in h["Tags"]
    else:
        doc = json.loads(body)
        assert h["Content-Type"] == "application/json"
        if fmt == "slack":
            assert doc == {"text": f"*Run hung on spark-1*\n{line}\nhttps://panel.lan/runs/3/"}
        elif fmt == "discord":
            assert doc["content"] == f"**Run hung on spark-1**\n{line}\nhttps://panel.lan/runs/3/"
            assert doc["allowed_mentions"] == {"parse": []}  # no @everyone from a message
        else:
            (attachment,) = doc["attachments"]
            card = attachment["content"]
            assert doc["type"] == "message" and card["type"] == "AdaptiveCard"
            assert [b["text"] for b in card["body"]] == ["Run hung on spark-1", line]
            assert card["actions"][0]["url"] == "https://panel.lan/runs/3/"
    delivery.refresh_from_db()
    assert delivery.state == "delivered"


def test_discord_content_is_cut_to_its_limit(receiver, member):
    payload = _incident_payload()
    payload["incident"]["message"] = "x" * 5000
    hook = _hook(member, receiver.url, events=("incident",), format="discord")
    deliver.apply(args=[_delivery(hook, payload, event="incident").pk])
    assert len(json.loads(receiver.requests[0]["body"])["content"]) <= 2000


def test_the_profile_form_adds_a_webhook_in_a_chosen_format(member):
    client = Client()
    client.force_login(member)
    answer = client.post("/accounts/profile/webhooks/", {
        "url": "http://127.0.0.1:9999/hook", "format": "slack", "events": ["incident"]})  # fmt: skip
    assert answer.status_code in (200, 302), answer.content[:300]
    assert Webhook.objects.get(user=member).format == "slack"
    bad = client.post("/accounts/profile/webhooks/", {
        "url": "http://127.0.0.1:9999/other", "format": "carrier-pigeon", "events": ["incident"]})  # fmt: skip
    assert bad.status_code == 400 and Webhook.objects.filter(user=member).count() == 1


def test_a_failed_run_is_posted_to_subscribed_webhooks(
    receiver, member, operator, sim_host, qwen, scheduled, django_capture_on_commit_callbacks
):
    from apps.runs.models import Run, RunState

    _hook(member, receiver.url, events=("run.failed",))
    _hook(operator, receiver.url, events=("run.ready",), format="ntfy")
    with django_capture_on_commit_callbacks(execute=True):
        run = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.READY, port=9,
                                 started_by=member)  # fmt: skip
        run.mark_failed("CUDA error: an illegal memory access")
    bodies = [json.loads(r["body"]) for r in receiver.requests]
    assert [b["event"] for b in bodies] == ["run.failed"]  # operator's hook: not their run
    assert bodies[0]["run"]["failure_reason"] == "CUDA error: an illegal memory access"
    assert bodies[0]["run"]["started_by"] == member.username

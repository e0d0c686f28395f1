"""Secrets stay secret: no page, export, error page, admin page, API answer, log record or
database row shows one.

The secrets get distinctive values: HF_TOKEN, a Redis password inside REDIS_URL (only in
the settings pages render with: no Redis with a password is needed), SECRET_KEY,
METRICS_TOKEN, a webhook secret, and an API token (clear and digest). An admin then GETs
every URL of the URL walk, every GET operation of the API, the exports, the error pages
and Django admin; a run is started and failed by the worker code with logging at DEBUG.
HF_TOKEN may appear in exactly one place: the environment of the container Docker is asked
to create (the worker passes it there); never in argv, the database, pages or logs.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

import docker.errors
import pytest
from django.contrib import admin
from django.test import Client, RequestFactory
from django.views import defaults

from apps.api.models import Webhook, WebhookDelivery
from apps.api.tokens import digest, token_create
from apps.hosts.engines import engine_for
from apps.hosts.models import Host
from apps.runs import runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from hubsim import store
from tests.conftest import free_port
from tests.security.urlwalk import (
    api_operations,
    api_request,
    concrete_path,
    db_snapshot,
    response_text,
    routes,
)

pytestmark = pytest.mark.django_db

HF_TOKEN = "hf_SecretHFToken7c1e9a4b"
REDIS_PASSWORD = "S3cretRedisPw"
SECRET_KEY = "django-SecretKey-9f8e7d6c5b4a3928-only-for-this-test-0123456789"
METRICS_TOKEN = "metrics-SecretToken-5a6b7c8d"
WEBHOOK_SECRET = "whsec_SecretWebhook8d9e0f1a2b"
# Things the walk should reach, on top of the bare URLs.
EXTRA_QUERIES = {
    "recipe-export": ["?slug={recipe_slug}"],
    "benchmark-compare": ["?jobs={jobs}", "?jobs={jobs}&format=csv"],
    "runs": ["?state=active", "?state=failed"],
    "benchmarks": ["?recipe={recipe}&host={host}"],
}


@pytest.fixture
def secrets(world, settings, monkeypatch, admin_user) -> dict[str, str]:
    parts = urlsplit(settings.REDIS_URL)
    redis_url = urlunsplit(
        parts._replace(netloc=f":{REDIS_PASSWORD}@{parts.hostname}:{parts.port}")
    )
    values = {
        "HF_TOKEN": HF_TOKEN,
        "SECRET_KEY": SECRET_KEY,
        "METRICS_TOKEN": METRICS_TOKEN,
        "REDIS_URL": redis_url,
    }
    for name, value in values.items():
        setattr(settings, name, value)
        monkeypatch.setenv(name, value)
    settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = redis_url
    _, clear = token_create(user=admin_user, name="admin laptop")
    hook = Webhook.objects.create(
        user=admin_user, url="http://127.0.0.1:9/admin-hook", secret=WEBHOOK_SECRET,
        events=[Webhook.Event.JOB_FINISHED, Webhook.Event.INCIDENT],
    )  # fmt: skip
    WebhookDelivery.objects.create(webhook=hook, event="ping", payload={"event": "ping"})
    return {
        "HF_TOKEN": HF_TOKEN,
        "the Redis password": REDIS_PASSWORD,
        "SECRET_KEY": SECRET_KEY,
        "METRICS_TOKEN": METRICS_TOKEN,
        "the webhook secret": WEBHOOK_SECRET,
        "the webhook secret (operator's)": world["webhook"].secret,
        "an API token": clear,
        "an API token's digest": digest(clear),
        "the API token's secret part": clear[12:],
        "a run's own vLLM API key": world["run"].api_key,
        "a gateway key's digest": world["gateway_key"].digest,
    }


def _leaks(text: str, secrets: dict[str, str]) -> list[str]:
    return [name for name, value in secrets.items() if value in text]


def _check(responses, secrets) -> list[str]:
    problems = []
    for label, response in responses:
        for name in _leaks(response_text(response), secrets):
            problems.append(f"{label} ({response.status_code}) shows {name}")
    return problems


def _page_urls(world) -> list[tuple[str, str]]:
    done = world["done_jobs"]
    fill = {"recipe_slug": world["recipe"].slug, "recipe": world["recipe"].pk,
            "host": world["host"].pk, "jobs": f"{done[0].pk},{done[1].pk}"}  # fmt: skip
    urls = []
    for route in routes():
        path = concrete_path(route, {**world, "job": done[0]})  # a job with results
        urls.append((route.key, path))
        for query in EXTRA_QUERIES.get(route.key, []):
            urls.append((route.key, path + query.format(**fill)))
    return urls


def test_no_page_export_or_api_answer_shows_a_secret(world, secrets, admin_user, client_as):
    client = client_as(admin_user)
    responses = []
    statuses = {}
    for key, url in _page_urls(world):
        headers = {"Authorization": f"Bearer {METRICS_TOKEN}"} if key == "panel-metrics" else {}
        response = client.get(url, headers=headers)
        responses.append((f"GET {url}", response))
        statuses[url] = response.status_code
    # The walk really rendered the pages and the exports (not 404s or redirects).
    done = world["done_jobs"][0].pk
    for url in ("/", "/status/", "/hosts/", "/accounts/profile/", f"/runs/{world['run'].pk}/",
                f"/benchmarks/jobs/{done}/results.csv", f"/benchmarks/jobs/{done}/results.json",
                f"/recipes/export/?slug={world['recipe'].slug}", "/metrics"):  # fmt: skip
        assert statuses[url] == 200, (url, statuses[url])
    assert sum(1 for s in statuses.values() if s == 200) >= 35

    api = Client()
    token = secrets["an API token"]
    reads = 0
    for method, path, op in api_operations():
        if method != "get":
            continue
        for query in ({}, {"format": "csv"}) if "compare" in path else ({},):
            url, _ = api_request(method, path, op, {**world, "job": world["done_jobs"][0]}, query)
            response = api.get(url, headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == 200, (url, response.content[:300])
            responses.append((f"API GET {url}", response))
            reads += 1
    assert reads >= 12
    schema = api.get("/api/v1/openapi.json", headers={"Authorization": f"Bearer {token}"})
    responses.append(("the OpenAPI schema", schema))

    problems = _check(responses, secrets)
    assert not problems, "\n".join(problems)


def test_error_pages_show_no_secret(world, secrets, admin_user, member, client_as, monkeypatch):
    client = client_as(admin_user)
    responses = [
        ("404 page", client.get("/no-such-page/")),
        ("API 404", client.get("/api/v2/nothing")),
        ("403 page", client_as(member).get("/recipes/new/")),
    ]
    assert [r.status_code for _, r in responses] == [404, 404, 403]
    request = RequestFactory().get("/")
    responses.append(("500 handler", defaults.server_error(request)))
    responses.append(("400 handler", defaults.bad_request(request, Exception(HF_TOKEN))))

    # A view that blows up with secrets in its exception: the 500 page shows none of it.
    def boom(*args, **kwargs):
        raise RuntimeError(f"boom {HF_TOKEN} {secrets_url()} {SECRET_KEY}")

    def secrets_url():
        from django.conf import settings

        return settings.REDIS_URL

    monkeypatch.setattr("apps.hosts.views.recent_incidents", boom)  # the name the view calls
    crashing = Client(raise_request_exception=False)
    crashing.force_login(admin_user)
    logging.getLogger("django.request").disabled = True  # the traceback is expected here
    try:
        crashed = crashing.get("/hosts/")
    finally:
        logging.getLogger("django.request").disabled = False
    assert crashed.status_code == 500
    responses.append(("500 page of a crashing view", crashed))
    problems = _check(responses, secrets)
    assert not problems, "\n".join(problems)


def test_django_admin_pages_show_no_secret(world, secrets, admin_user, client_as):
    client = client_as(admin_user)
    responses = []
    for model in admin.site._registry:
        meta = model._meta
        base = f"/admin/{meta.app_label}/{meta.model_name}/"
        responses.append((f"{meta.label} list", client.get(base)))
        responses.append((f"{meta.label} add", client.get(base + "add/")))
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            responses.append((f"{meta.label} change", client.get(f"{base}{first.pk}/change/")))
    labels = {m._meta.label for m in admin.site._registry}
    assert {"hosts.Host", "api.ApiToken", "api.Webhook", "api.WebhookDelivery"} <= labels
    for label, response in responses:
        assert response.status_code in (200, 403), (label, response.status_code)  # 403: no add
    assert sum(1 for _, r in responses if r.status_code == 200) >= 25
    problems = _check(responses, secrets)
    assert not problems, "\n".join(problems)


class FakeDocker:
    """Docker as the worker sees it: records create kwargs; the container exits at once
    with a few log lines (as a vLLM that crashed while loading would)."""

    LOG = (
        b"2026-01-01T00:00:00.000000000Z INFO non-default args: {'model': 'Qwen/Qwen3-32B'}\n"
        b"2026-01-01T00:00:01.000000000Z ERROR the engine core died\n"
    )

    def __init__(self):
        self.created: list[dict] = []
        self.containers = self
        self.images = self
        self.id = "c0ffee"
        self.attrs = {"State": {"Status": "exited", "ExitCode": 1, "OOMKilled": False}}

    def get(self, ref):
        if ref.startswith("sparkpanel-") and not self.created:
            raise docker.errors.NotFound("no such container")
        return self

    def create(self, **kwargs):
        self.created.append(kwargs)
        return self

    def start(self):
        return None

    def logs(self, **kwargs):
        return self.LOG if kwargs.get("timestamps") else b"the engine core died\n"

    def stop(self, **kwargs):
        return None

    def remove(self, **kwargs):
        return None


def test_a_run_start_keeps_hf_token_out_of_argv_the_database_pages_and_logs(
    world, secrets, operator, admin_user, client_as, caplog, monkeypatch,
    django_capture_on_commit_callbacks, hub, settings, tmp_path,
):  # fmt: skip
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpx2", "axes", "docker", "urllib3", "celery", "django", "apps",
                 "huggingface_hub", "filelock"):  # fmt: skip
        caplog.set_level(logging.DEBUG, logger=name)
    # The recipe's model is gated on the (local) hub: the worker's download needs the token.
    model = world["recipe"].model_id
    store.publish(hub.root, model, {"config.json": b"{}", "tokenizer.json": b"{}",
                                    "model.safetensors": b"w" * 4096},
                  gated="manual", tokens=[HF_TOKEN])  # fmt: skip
    settings.HF_ENDPOINT = hub.url
    port = free_port()
    (tmp_path / "hf").mkdir()
    host = Host.objects.create(
        name="sec-spark-2", engine=Host.Engine.DOCKER, simulated=True, gpus=True,
        hf_cache_path=str(tmp_path / "hf"), image_allowlist=["vllm/vllm-openai:*"],
        port_min=port, port_max=port,
    )  # fmt: skip
    queued = []
    monkeypatch.setattr(
        "apps.runs.tasks.start_run.apply_async", lambda *a, **kw: queued.append((a, kw))
    )
    with django_capture_on_commit_callbacks(execute=True):
        run = run_start(recipe=world["recipe"], host=host, user=operator)
    assert queued and queued[0][1]["queue"] == host.queue  # the worker's task was sent

    # The worker: the real template on a real (not simulated) Spark, Docker faked.
    fake = FakeDocker()

    def engine(host):
        host.simulated = False
        built = engine_for(host)
        built._client = fake
        return built

    monkeypatch.setattr(runner, "engine_for", engine)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.FAILED and "exited with code 1" in run.failure_reason

    assert run.facts["weights"]["by"] == "panel"  # downloaded with the token, then offline
    assert {r["status"] for r in hub.requests() if "/resolve/" in r["path"]} <= {200, 206, 302}
    [kwargs] = fake.created
    assert kwargs["environment"]["HF_TOKEN"] == HF_TOKEN  # handed to vLLM, by env only
    assert kwargs["environment"]["HF_HUB_OFFLINE"] == "1"
    rest = {**kwargs, "environment": {k: v for k, v in kwargs["environment"].items()
                                      if k != "HF_TOKEN"}}  # fmt: skip
    assert HF_TOKEN not in repr(rest)
    assert HF_TOKEN not in " ".join(kwargs["command"] + kwargs["entrypoint"])
    assert HF_TOKEN not in " ".join(run.argv)
    assert not _leaks(repr(Run.objects.filter(pk=run.pk).values().get()), secrets)

    # Nothing in the database at all holds a settings secret.
    stored = repr(db_snapshot())
    for name in ("HF_TOKEN", "the Redis password", "SECRET_KEY", "METRICS_TOKEN"):
        assert secrets[name] not in stored, f"{name} is in the database"

    # Nor in any log record, at any level.
    assert caplog.records, "no log record was captured: is logging wired?"
    for record in caplog.records:
        text = f"{record.getMessage()} {record.args!r} {record.exc_text or ''}"
        leaked = _leaks(text, secrets)
        assert not leaked, f"{record.name} logged {leaked}: {text[:300]}"

    # Nor on the failed run's page, in the API's run detail or the runs list.
    client = client_as(admin_user)
    _, token = token_create(user=admin_user, name="reader")
    pages = [
        ("run page", client.get(f"/runs/{run.pk}/")),
        ("runs list", client.get("/runs/")),
        ("API run", Client().get(f"/api/v1/runs/{run.pk}",
                                 headers={"Authorization": f"Bearer {token}"})),
    ]  # fmt: skip
    assert all(r.status_code == 200 for _, r in pages)
    assert b"the engine core died" in pages[0][1].content  # the log tail is shown
    problems = _check(pages, secrets)
    assert not problems, "\n".join(problems)

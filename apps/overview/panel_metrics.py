"""The panel's own Prometheus endpoint (/metrics), for a team's existing Prometheus/Grafana:
runs by state, benchmark jobs, host agents and workers, watchdog incidents, and the
gateway's requests and tokens per user and model."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from apps.benchmarks.models import J, Job
from apps.gateway import usage
from apps.gateway.models import UsageRecord
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from apps.telemetry.models import Incident


def _allowed(request: HttpRequest) -> bool:
    """The bearer token, or else the client's address in METRICS_ALLOWED_NETWORKS. The
    address is REMOTE_ADDR only, never a forwarding header: behind a proxy uvicorn sets it
    to the address the trusted proxy appended (FORWARDED_ALLOW_IPS, docs/deploy.md)."""
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(sent.encode(), token.encode())
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    networks = settings.METRICS_ALLOWED_NETWORKS
    return any(address in ipaddress.ip_network(net, strict=False) for net in networks)


class PanelCollector:
    """Gauges read from the database at scrape time."""

    def collect(self):
        runs = GaugeMetricFamily("sparkpanel_runs", "Runs by state.", labels=["state"])
        counts = dict(Run.objects.values_list("state").annotate(n=Count("pk")))
        for state in RunState.values:
            runs.add_metric([state], counts.get(state, 0))
        yield runs

        def gauge(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=["host"])

        queue = gauge("sparkpanel_benchmark_queue_depth", "Benchmark jobs waiting, per host.")
        running = gauge("sparkpanel_benchmark_jobs_running", "Benchmark jobs running, per host.")
        available = gauge("sparkpanel_host_memory_available_bytes", "MemAvailable (host agent).")
        total = gauge("sparkpanel_host_memory_total_bytes", "MemTotal (host agent).")
        agent = gauge("sparkpanel_host_agent_up", "1 when the host agent reported in 5 s.")
        worker = gauge("sparkpanel_host_worker_up", "1 when the host's Celery worker was seen.")
        incidents = CounterMetricFamily(
            "sparkpanel_incidents", "Watchdog incidents.", labels=["host", "kind"]
        )
        by_host = {
            (h, k): n
            for h, k, n in Incident.objects.values_list("host__name", "kind").annotate(
                n=Count("pk")
            )
        }
        for host in Host.objects.all():
            queue.add_metric([host.name], Job.objects.filter(host=host, state=J.QUEUED).count())
            running.add_metric([host.name], Job.objects.filter(host=host, state=J.RUNNING).count())
            agent.add_metric([host.name], 1 if host.agent_live else 0)
            worker.add_metric([host.name], 1 if host.online else 0)
            sample = host.agent_sample or {}
            if host.agent_live and sample.get("mem_available") is not None:
                available.add_metric([host.name], sample["mem_available"])
                total.add_metric([host.name], sample.get("mem_total") or 0)
            for kind in ("act", "warn", "alert"):
                incidents.add_metric([host.name, kind], by_host.get((host.name, kind), 0))
        yield from (queue, running, available, total, agent, worker, incidents)
        yield from gateway_counters()


def gateway_counters():
    """Requests and tokens through the gateway (and chat answers) per user and model, from
    the usage rows (never deleted, so the counters only grow)."""
    usage.drain(wait_s=0.5)
    labels = ["user", "model"]
    requests = CounterMetricFamily(
        "sparkpanel_gateway_requests", "Requests through /v1 and chat answers.", labels=labels
    )
    failed = CounterMetricFamily(
        "sparkpanel_gateway_failed_requests", "Requests answered with an error.", labels=labels
    )
    prompt = CounterMetricFamily(
        "sparkpanel_gateway_prompt_tokens", "Prompt tokens.", labels=labels
    )
    completion = CounterMetricFamily(
        "sparkpanel_gateway_completion_tokens", "Completion tokens.", labels=labels
    )
    for row in usage.by_user_and_model(UsageRecord.objects.all()):
        key = [row["user__username"] or "", row["model"]]
        requests.add_metric(key, row["requests"])
        failed.add_metric(key, row["errors"])
        prompt.add_metric(key, row["prompt"])
        completion.add_metric(key, row["completion"])
    yield from (requests, failed, prompt, completion)


@login_not_required
@never_cache
@require_GET
def panel_metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        return HttpResponse("forbidden: set METRICS_TOKEN or scrape from an allowed network\n",
                            status=403, content_type="text/plain")  # fmt: skip
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PanelCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

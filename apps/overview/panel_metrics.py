"""The panel's own Prometheus endpoint (/metrics), for a team's existing Prometheus/Grafana:
runs by state, benchmark jobs, host agents and workers, watchdog incidents and the
watchdog's state and forecast, each active run's key vLLM series (from its host agent's
latest sample, labelled host, run and recipe), and the gateway's requests and tokens per
user and model. The repo's Grafana dashboard and Prometheus alert rules
(deploy/grafana/, deploy/prometheus/) read these names."""

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
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from apps.telemetry.models import Incident
from apps.telemetry.selectors import run_samples


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
            for kind in Incident.Kind.values:
                incidents.add_metric([host.name, kind], by_host.get((host.name, kind), 0))
        yield from (queue, running, available, total, agent, worker, incidents)
        samples = live_samples()
        yield from guard_gauges(samples)
        yield from run_series(samples)
        yield from gateway_counters()


def live_samples() -> list[tuple[Host, dict]]:
    """Each host whose agent reported in the last seconds, with its latest sample."""
    return [(h, h.agent_sample or {}) for h in Host.objects.all() if h.agent_live]


WATCHDOG_LEVELS = {"ok": 0, "warn": 1, "act": 2}


def guard_gauges(samples: list[tuple[Host, dict]]):
    """The memory watchdog per host: its level, its lines and its forecast."""
    labels = ["host"]
    level = GaugeMetricFamily(
        "sparkpanel_host_watchdog_level", "Watchdog level: 0 ok, 1 warn, 2 act.", labels=labels
    )
    warn = GaugeMetricFamily(
        "sparkpanel_host_watchdog_warn_bytes", "Warn below this MemAvailable.", labels=labels
    )
    act = GaugeMetricFamily(
        "sparkpanel_host_watchdog_act_bytes", "Stop the run below this MemAvailable.", labels=labels
    )
    fall = GaugeMetricFamily(
        "sparkpanel_host_memory_fall_bytes_per_second",
        "How fast MemAvailable falls (the watchdog's trend; absent while it is not falling).",
        labels=labels,
    )
    eta = GaugeMetricFamily(
        "sparkpanel_host_memory_act_eta_seconds",
        "Seconds until the fall would reach the act line (absent while it is not falling).",
        labels=labels,
    )
    for host, sample in samples:
        key = [host.name]
        if sample.get("mem_level") in WATCHDOG_LEVELS:
            level.add_metric(key, WATCHDOG_LEVELS[sample["mem_level"]])
        warn.add_metric(key, host.watchdog_warn_bytes)
        act.add_metric(key, host.watchdog_act_bytes)
        if sample.get("mem_fall_bytes_s") is not None and sample.get("mem_eta_s") is not None:
            fall.add_metric(key, sample["mem_fall_bytes_s"])
            eta.add_metric(key, sample["mem_eta_s"])
    yield from (level, warn, act, fall, eta)


# (name, help, the sample's key, scale): gauges from the agent's derived vLLM figures.
RUN_GAUGES = (
    ("sparkpanel_run_kv_cache_usage_ratio", "KV cache in use, 0-1.", "kv_usage_pct", 0.01),
    ("sparkpanel_run_requests_running", "Requests running.", "running", 1),
    ("sparkpanel_run_requests_waiting", "Requests waiting.", "waiting", 1),
    ("sparkpanel_run_prompt_tokens_per_second", "Prompt tokens/s.", "prompt_tps", 1),
    ("sparkpanel_run_generation_tokens_per_second", "Generated tokens/s.", "generation_tps", 1),
    ("sparkpanel_run_prefix_cache_hit_ratio", "Prefix cache hit rate.", "prefix_hit_rate", 1),
)
# (name, help, {quantile: the sample's key}): over the last minute's histograms.
RUN_QUANTILES = (
    (
        "sparkpanel_run_ttft_seconds",
        "Time to first token.",
        {"0.5": "ttft_p50", "0.95": "ttft_p95"},
    ),
    ("sparkpanel_run_itl_seconds", "Inter-token latency.", {"0.5": "itl_p50", "0.95": "itl_p95"}),
)


def run_series(samples: list[tuple[Host, dict]]):
    """Each active run's key vLLM series, as its host agent last derived them from the
    run's /metrics (once a second), labelled host, run and recipe — one scrape of the panel
    covers every Spark. A pair's worker Spark reports memory only (its head has the run)."""
    scraped = [(h, s) for h, host_sample in samples for s in run_samples(host_sample)
               if not s.get("pair_worker")]  # fmt: skip
    names = dict(
        Run.objects.filter(pk__in=[s["run"] for _, s in scraped]).values_list("pk", "recipe__name")
    )
    labels = ["host", "run", "recipe"]
    gauges = [(GaugeMetricFamily(n, h, labels=labels), key, k) for n, h, key, k in RUN_GAUGES]
    quantiles = [
        (GaugeMetricFamily(n, h, labels=[*labels, "quantile"]), keys)
        for n, h, keys in RUN_QUANTILES
    ]
    preemptions = CounterMetricFamily(
        "sparkpanel_run_preemptions", "Preemptions since the server started.", labels=labels
    )
    for host, sample in scraped:
        if sample["run"] not in names:
            continue
        key = [host.name, str(sample["run"]), names[sample["run"]]]
        for family, field, scale in gauges:
            if sample.get(field) is not None:
                family.add_metric(key, sample[field] * scale)
        for family, keys in quantiles:
            for quantile, field in keys.items():
                if sample.get(field) is not None:
                    family.add_metric([*key, quantile], sample[field])
        if sample.get("preemptions_total") is not None:
            preemptions.add_metric(key, sample["preemptions_total"])
    yield from (family for family, _, _ in gauges)
    yield from (family for family, _ in quantiles)
    yield preemptions


def gateway_counters():
    """Requests and tokens through the gateway (and chat answers) per user and model, from
    the usage rows and the totals of rows the retention policy deleted (so the counters
    only grow). A model nobody serves is one label (apps/gateway/asgi.py::UNKNOWN_MODEL)."""
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
    for row in usage.counters():
        key = [row["user__username"] or "", row["model"]]
        requests.add_metric(key, row["requests"])
        failed.add_metric(key, row["errors"])
        prompt.add_metric(key, row["prompt"])
        completion.add_metric(key, row["completion"])
    refused = CounterMetricFamily(
        "sparkpanel_gateway_refused_requests",
        "Requests refused before any model: no or bad key, no role, a limit, a browser "
        "origin (code); user is empty when no key named one.",
        labels=["user", "code"],
    )
    for user, code, count in usage.refusal_counters():
        refused.add_metric([user, code], count)
    yield from (requests, failed, prompt, completion, refused)


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

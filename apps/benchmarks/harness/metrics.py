"""What the server did during a level, from its own /metrics:

- the cross-check, scraped before and after the measured requests (`scrape_metrics`,
  `_try_scrape`), and the difference between the two (`_server_delta`: the server's mean
  TTFT/ITL/E2E/prefill/decode/queue time, its token, preemption and prefix-cache counters
  and hit rate, and the client's overhead over the server's TTFT);
- its scheduler's state while the level runs (`ServerSampler`: KV cache usage, requests
  running and waiting, peak and mean). The sampler only fetches the text during the level
  (an await on a socket); every body is parsed after the level ends, so parsing never
  holds up the event loop whose timestamps are the measurement.

The families' names are `vllm_adapter.metric_names`'; the parsing is
`vllm_adapter.metrics`'."""

from __future__ import annotations

import asyncio
import time

import httpx

from apps.benchmarks.harness.client import Client
from apps.benchmarks.harness.types import ERROR_TEXT_MAX
from vllm_adapter import endpoints, metric_names
from vllm_adapter.metrics import acceptance, parse, totals

# The server-side cross-check's families, from the one table of vLLM metric names.
HISTOGRAMS = metric_names.read_by(metric_names.BENCHMARKS, metric_names.HISTOGRAM)
COUNTERS = metric_names.read_by(metric_names.BENCHMARKS, metric_names.COUNTER)
GAUGES = metric_names.read_by(metric_names.BENCHMARKS, metric_names.GAUGE)
SAMPLE_EVERY_S = 0.25  # wall seconds between two samples of the scheduler's state
MAX_SAMPLES = 400  # beyond it every other sample is dropped and the period doubles
MAX_SAMPLE_BYTES = 2_000_000  # a /metrics body past this is not kept


def parse_metrics(text: str) -> dict:
    """`{"ttft": {"sum", "count", "metric"}, ..., "prompt_tokens": n, ...}` from Prometheus
    text, summed over label sets (engines); older names are read when the current one is
    absent (ITL's pre-0.11 name). Raises ValueError on text that does not parse."""
    return totals(text, metric_names.BENCHMARKS)


async def scrape_metrics(client: Client) -> dict:
    """GET /metrics and parse the histograms and counters the cross-check needs."""
    response = await client.http.get(endpoints.METRICS, timeout=10)
    response.raise_for_status()
    return parse_metrics(response.text)


def _server_delta(before: dict, after: dict, client_ttft_mean: float | None, scale: float):
    out: dict = {"ok": True}
    for key in HISTOGRAMS:
        if key in before and key in after:
            n = after[key]["count"] - before[key]["count"]
            s = after[key]["sum"] - before[key]["sum"]
            out[f"mean_{key}_s"] = s / n if n > 0 else None
            if key == "e2e":
                out["requests"] = n
        else:
            out[f"mean_{key}_s"] = None
    for key in COUNTERS:
        out[key] = after[key] - before[key] if key in before and key in after else None
    queries, hits = out.get("prefix_queries"), out.get("prefix_hits")
    out["prefix_hit_rate"] = hits / queries if queries and hits is not None else None
    # Speculative decoding over the level, as vLLM logs it: accepted ÷ drafted tokens and
    # 1 + accepted per draft (None on a server without it).
    out["spec_acceptance_rate"], out["spec_mean_acceptance_length"] = acceptance(
        out.get("spec_drafts"), out.get("spec_draft_tokens"), out.get("spec_accepted")
    )
    server_ttft = out.get("mean_ttft_s")
    if client_ttft_mean is not None and server_ttft is not None:
        out["overhead_ms"] = (client_ttft_mean - server_ttft) * 1000
        out["overhead_wall_ms"] = out["overhead_ms"] / scale
    else:
        out["overhead_ms"] = out["overhead_wall_ms"] = None
    return out


async def _try_scrape(client: Client) -> tuple[dict | None, str | None]:
    try:
        return await scrape_metrics(client), None
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return None, f"/metrics: {type(exc).__name__}: {exc}"[:ERROR_TEXT_MAX]


class ServerSampler:
    """Fetches /metrics every SAMPLE_EVERY_S while a level runs (`run` as a task, cancel it
    at the end), then `summary()` parses what it kept: KV cache usage (0–1) and requests
    running and waiting, each with its peak and mean over the samples."""

    def __init__(self, client: Client, every_s: float = SAMPLE_EVERY_S):
        self.client, self.every = client, every_s
        self.bodies: list[str] = []
        self.failures = 0

    async def run(self) -> None:
        monotonic = time.monotonic
        due = monotonic()
        while True:
            try:
                response = await self.client.http.get(endpoints.METRICS, timeout=5)
                text = response.text if response.status_code == 200 else ""
            except httpx.HTTPError:
                text = ""
            if text and len(text) <= MAX_SAMPLE_BYTES:
                self.bodies.append(text)
            else:
                self.failures += 1
            if len(self.bodies) >= MAX_SAMPLES:
                del self.bodies[::2]
                self.every *= 2
            due += self.every
            await asyncio.sleep(max(due - monotonic(), 0))

    def summary(self) -> dict:
        series: dict[str, list[float]] = {key: [] for key in GAUGES}
        for body in self.bodies:
            snapshot = parse(body)
            for key in GAUGES:
                value = getattr(snapshot, key, None)
                if value is not None:
                    series[key].append(value)
        out: dict = {"samples": len(self.bodies), "sample_failures": self.failures}
        for key, values in series.items():
            out[f"{key}_peak"] = max(values) if values else None
            out[f"{key}_mean"] = sum(values) / len(values) if values else None
        return out

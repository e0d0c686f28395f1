"""The server-side cross-check: the vLLM server's own /metrics, scraped before and after
the measured requests (`scrape_metrics`, `_try_scrape`), and the difference between the
two (`_server_delta`: the server's mean TTFT/ITL/E2E/prefill/decode, token counters, and
the client's overhead over the server's TTFT). The families' names are
`vllm_adapter.metric_names`'; the parsing is `vllm_adapter.metrics`'."""

from __future__ import annotations

import httpx

from apps.benchmarks.harness.client import Client
from apps.benchmarks.harness.types import ERROR_TEXT_MAX
from vllm_adapter import endpoints, metric_names
from vllm_adapter.metrics import totals

# The server-side cross-check's families, from the one table of vLLM metric names.
HISTOGRAMS = metric_names.read_by(metric_names.BENCHMARKS, metric_names.HISTOGRAM)
COUNTERS = metric_names.read_by(metric_names.BENCHMARKS, metric_names.COUNTER)


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

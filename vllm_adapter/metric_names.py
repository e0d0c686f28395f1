"""The vLLM Prometheus metric families SparkPanel reads or imitates: one table.

Every place that names a vLLM metric takes the name from here: the host agent's parser
(``vllm_adapter.metrics``), the benchmark harness's server-side cross-check
(``apps.benchmarks.harness``) and sparksim's ``/metrics`` (``sparksim.metrics``, which
emits every family below so that the panel cannot tell it from vLLM).

``tests/vllm_adapter/test_metric_names.py`` checks each current name, its type and its
help text against the contracts generated from real vLLM
(``vllm_adapter/contracts/vllm-<version>.json``); a name that the newest contract lacks
fails there unless it is listed as an older alias of a current one.

Names are as vLLM's source writes them. prometheus_client exposes a counter ``x`` as the
sample ``x_total`` (and ``x_created``); a histogram ``x`` as ``x_bucket``, ``x_sum`` and
``x_count``. ``vllm:iteration_tokens_total`` is a histogram despite its name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "BENCHMARKS",
    "COUNTER",
    "FAMILIES",
    "GAUGE",
    "HISTOGRAM",
    "LABELNAMES",
    "SPARKSIM",
    "TELEMETRY",
    "Family",
    "by_key",
    "check",
    "family",
    "names",
    "read_by",
    "sample_names",
]

GAUGE, COUNTER, HISTOGRAM = "gauge", "counter", "histogram"
# Who reads a family (``Family.read_by``); sparksim emits every family in the table.
TELEMETRY, BENCHMARKS, SPARKSIM = "telemetry", "benchmarks", "sparksim"
# The labels vLLM V1's PrometheusStatLogger puts on every per-engine series
# (vllm/v1/metrics/loggers.py: ``labelnames = ["model_name", "engine"]``).
LABELNAMES: tuple[str, ...] = ("model_name", "engine")


@dataclass(frozen=True)
class Family:
    """One metric family.

    ``key``: the panel's name for it. ``name``: vLLM's current name (counters without
    ``_total``). ``aliases``: older names of the same series, newest first, read when the
    current one is absent (an older server). ``labels``: labels beyond ``LABELNAMES``.
    ``read_by``: which parts of the panel read it (empty: only sparksim emits it, to look
    like vLLM). ``unscanned``: why the contracts cannot list it (their source scan reads
    only literal ``name=`` arguments); such a family is checked against a contract
    whenever one does list it.
    """

    key: str
    name: str
    type: str
    documentation: str
    aliases: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    read_by: tuple[str, ...] = ()
    unscanned: str = ""
    speculative: bool = False  # exported only by a server that runs speculative decoding

    @property
    def names(self) -> tuple[str, ...]:
        """The current name, then the aliases: the order a reader tries them in."""
        return (self.name, *self.aliases)


_T, _B = TELEMETRY, BENCHMARKS

FAMILIES: tuple[Family, ...] = (
    # --- scheduler state --------------------------------------------------------------
    Family("running", "vllm:num_requests_running", GAUGE,
           "Number of requests in model execution batches.", read_by=(_T, _B)),
    Family("waiting", "vllm:num_requests_waiting", GAUGE,
           "Number of requests waiting to be processed.", read_by=(_T, _B)),
    Family("kv_usage", "vllm:kv_cache_usage_perc", GAUGE,
           "KV-cache usage. 1 means 100 percent usage.",
           aliases=("vllm:gpu_cache_usage_perc",), read_by=(_T, _B)),
    Family("cache_config", "vllm:cache_config_info", GAUGE,
           "Information of the LLMEngine CacheConfig",
           unscanned="named in a variable in PrometheusStatLogger.log_metrics_info; its "
                     "labels are CacheConfig.metrics_info() plus engine, no model_name"),
    # --- counters ---------------------------------------------------------------------
    Family("prefix_queries", "vllm:prefix_cache_queries", COUNTER,
           "Prefix cache queries, in terms of number of queried tokens.",
           aliases=("vllm:gpu_prefix_cache_queries",), read_by=(_T, _B)),
    Family("prefix_hits", "vllm:prefix_cache_hits", COUNTER,
           "Prefix cache hits, in terms of number of cached tokens.",
           aliases=("vllm:gpu_prefix_cache_hits",), read_by=(_T, _B)),
    Family("preemptions", "vllm:num_preemptions", COUNTER,
           "Cumulative number of preemption from the engine.", read_by=(_T, _B)),
    Family("prompt_tokens", "vllm:prompt_tokens", COUNTER,
           "Number of prefill tokens processed.", read_by=(_T, _B)),
    Family("generation_tokens", "vllm:generation_tokens", COUNTER,
           "Number of generation tokens processed.", read_by=(_T, _B)),
    Family("request_success", "vllm:request_success", COUNTER,
           "Count of successfully processed requests.", labels=("finished_reason",),
           read_by=(_T,)),
    # --- per-request and per-step histograms ------------------------------------------
    Family("request_prompt_tokens", "vllm:request_prompt_tokens", HISTOGRAM,
           "Number of prefill tokens processed."),
    Family("request_generation_tokens", "vllm:request_generation_tokens", HISTOGRAM,
           "Number of generation tokens processed."),
    Family("iteration_tokens", "vllm:iteration_tokens_total", HISTOGRAM,
           "Histogram of number of tokens per engine_step."),
    Family("ttft", "vllm:time_to_first_token_seconds", HISTOGRAM,
           "Histogram of time to first token in seconds.", read_by=(_T, _B)),
    Family("itl", "vllm:inter_token_latency_seconds", HISTOGRAM,
           "Histogram of inter-token latency in seconds.",
           aliases=("vllm:time_per_output_token_seconds",), read_by=(_T, _B)),
    Family("request_tpot", "vllm:request_time_per_output_token_seconds", HISTOGRAM,
           "Histogram of time_per_output_token_seconds per request."),
    Family("e2e", "vllm:e2e_request_latency_seconds", HISTOGRAM,
           "Histogram of e2e request latency in seconds.", read_by=(_T, _B)),
    Family("queue", "vllm:request_queue_time_seconds", HISTOGRAM,
           "Histogram of time spent in WAITING phase for request.", read_by=(_B,)),
    Family("inference", "vllm:request_inference_time_seconds", HISTOGRAM,
           "Histogram of time spent in RUNNING phase for request."),
    Family("prefill", "vllm:request_prefill_time_seconds", HISTOGRAM,
           "Histogram of time spent in PREFILL phase for request.", read_by=(_B,)),
    Family("decode", "vllm:request_decode_time_seconds", HISTOGRAM,
           "Histogram of time spent in DECODE phase for request.", read_by=(_B,)),
    # --- speculative decoding (vllm/v1/spec_decode/metrics.py SpecDecodingProm): only on
    # a server started with --speculative-config ----------------------------------------
    Family("spec_drafts", "vllm:spec_decode_num_drafts", COUNTER,
           "Number of spec decoding drafts.", read_by=(_T, _B), speculative=True),
    Family("spec_draft_tokens", "vllm:spec_decode_num_draft_tokens", COUNTER,
           "Number of draft tokens.", read_by=(_T, _B), speculative=True),
    Family("spec_accepted", "vllm:spec_decode_num_accepted_tokens", COUNTER,
           "Number of accepted tokens.", read_by=(_T, _B), speculative=True),
    Family("spec_accepted_per_pos", "vllm:spec_decode_num_accepted_tokens_per_pos", COUNTER,
           "Accepted tokens per draft position.", labels=("position",), read_by=(_T,),
           speculative=True),
)  # fmt: skip

by_key: dict[str, Family] = {f.key: f for f in FAMILIES}
if len(by_key) != len(FAMILIES):  # pragma: no cover - a typo in the table above
    raise RuntimeError("duplicate metric family keys")


def family(key: str) -> Family:
    """The family of the panel's ``key`` (KeyError for an unknown key)."""
    return by_key[key]


def read_by(reader: str, type_: str | None = None) -> dict[str, tuple[str, ...]]:
    """``{key: names}`` of the families ``reader`` reads (optionally of one type), in
    table order, each with its current name first."""
    return {
        f.key: f.names
        for f in FAMILIES
        if reader in f.read_by and (type_ is None or f.type == type_)
    }


def names(key: str) -> tuple[str, ...]:
    """The current name of ``key`` and its aliases."""
    return by_key[key].names


def sample_names(f: Family, name: str | None = None) -> tuple[str, ...]:
    """The sample names prometheus_client exposes for ``f`` (under ``name``, one of its
    names; the current one by default)."""
    base = name or f.name
    if f.type == COUNTER:
        return (base + "_total", base + "_created")
    if f.type == HISTOGRAM:
        return (base + "_bucket", base + "_count", base + "_sum", base + "_created")
    return (base,)


def _in_contract(metrics: Mapping[str, dict], f: Family, name: str) -> dict | None:
    """The contract's entry for ``name`` (prometheus_client drops a counter's ``_total``
    from the family name, so vLLM's source may write it either way)."""
    found = metrics.get(name)
    if found is None and f.type == COUNTER:
        found = metrics.get(name + "_total")
    return found


def check(
    metrics: Mapping[str, dict], *, newest: bool, families: Iterable[Family] = FAMILIES
) -> list[str]:
    """What is wrong with ``families`` against one contract's ``metrics`` (name to
    ``{"name", "type", "documentation", ...}``, as ``vllm_adapter.contract`` loads them),
    in words; empty when all is well.

    Against the ``newest`` contract every current name must be there with its type and
    help text, and no alias may still be a current name there (it would not be old).
    Against an older supported one, the current name or one of the aliases must be
    there with the right type. An ``unscanned`` family is checked only where the
    contract does list it.
    """
    problems = []
    for f in families:
        found = _in_contract(metrics, f, f.name)
        if f.unscanned and found is None:
            continue
        if newest:
            if found is None:
                problems.append(
                    f"{f.name} ({f.key}): not in the contract; if vLLM renamed "
                    f"it, make the new name current and keep this one as an alias"
                )
                continue
            if (
                found.get("documentation") is not None
                and " ".join(f.documentation.split()) != found["documentation"]
            ):
                problems.append(
                    f"{f.name}: help text {found['documentation']!r} in vLLM, "
                    f"{f.documentation!r} here"
                )
            problems.extend(
                f"{alias} ({f.key}): listed as an older alias, but the contract still has it"
                for alias in f.aliases
                if _in_contract(metrics, f, alias) is not None
            )
        elif found is None:
            found = next(
                (e for n in f.aliases if (e := _in_contract(metrics, f, n)) is not None), None
            )
            if found is None:
                problems.append(f"{f.key}: none of {', '.join(f.names)} in the contract")
                continue
        if found.get("type") != f.type:
            problems.append(f"{found.get('name')}: a {found.get('type')} in vLLM, a {f.type} here")
    return problems

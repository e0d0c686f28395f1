"""vLLM's Prometheus metrics, with vLLM's exact names, labels and buckets.

The point of the simulator is that SparkPanel cannot tell it from a real vLLM V1
server, so ``/metrics`` must expose the same families, types, label sets and
histogram buckets. Everything here mirrors ``PrometheusStatLogger`` in vLLM's
``vllm/v1/metrics/loggers.py`` (read in the upstream repository; the
inter-token-latency and per-request TPOT histograms come from the 0.11+ layout):

- every series carries ``model_name`` and ``engine`` (``"0"``: one engine core);
- ``vllm:cache_config_info`` is an info-style gauge fixed at 1 whose labels are the
  cache config's fields plus ``engine``, and *no* ``model_name`` (vLLM builds its
  label set from ``CacheConfig.metrics_info()`` and adds only ``engine``);
- counters are exposed with ``_total`` (and, as from a real server, ``_created``);
- ``vllm:request_success`` has an extra ``finished_reason`` label, with a series
  for every reason created up front at 0, as vLLM does.

Deprecated aliases that newer vLLM versions hide (``vllm:gpu_cache_usage_perc``,
``vllm:time_per_output_token_seconds``, ``vllm:gpu_prefix_cache_*``) are left out.

When things are recorded follows vLLM, so rates computed from the simulator mean
the same as on a real server:

- TTFT is observed when the request's first token is produced (``observe_ttft``),
  not when it finishes, so in-flight and later-aborted requests count;
  ``observe_finished`` therefore does NOT observe TTFT.
- inter-token latency is observed for every output token after the first
  (``observe_inter_token``);
- the per-request histograms (e2e, queue, prefill, decode, inference, prompt and
  generation token counts, mean time per output token) and ``request_success`` are
  recorded when the request finishes (``observe_finished``);
- nothing is counted for a prefill until the engine step that gives the request its
  first token: vLLM's engine core emits no output for a partial prefill, and its
  ``vllm:prompt_tokens`` (the whole prompt) and ``vllm:iteration_tokens_total`` (one
  observation per step with outputs: the prompt tokens computed by the prefills that
  finished in it plus the tokens generated) come from outputs only. What moves during a
  long prefill is ``vllm:kv_cache_usage_perc``: vLLM allocates a prompt's KV blocks chunk
  by chunk (sparksim/engine.py shows them so). The guard's hang rule relies on this
  (apps/guard/hang.py).

A private ``CollectorRegistry`` keeps several simulated servers in one process (and
tests) from colliding, and keeps the process's default metrics out of the output.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from vllm_adapter.metric_names import COUNTER, GAUGE, HISTOGRAM, LABELNAMES, family

# What prometheus_client's ASGI app (which vLLM mounts at /metrics) answers a client
# that sends no Accept header, e.g. curl or SparkPanel's poller.
CONTENT_TYPE: str = CONTENT_TYPE_PLAIN_0_0_4

ENGINE = "0"

# vllm/v1/engine/__init__.py FINISH_REASON_STRINGS (newest upstream); vLLM creates a
# request_success series for each one at start-up.
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")

# Bucket boundaries, copied from vllm/v1/metrics/loggers.py (PrometheusStatLogger).
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
    7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
# Shared by vllm:inter_token_latency_seconds and
# vllm:request_time_per_output_token_seconds.
PER_TOKEN_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
# vLLM's request_latency_buckets: e2e, queue, prefill, decode and inference time.
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)  # fmt: skip


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value``: vLLM's token-count buckets.

    Same rule as vLLM's ``build_1_2_5_buckets``: stop at the first value above
    ``max_value``.
    """
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


class VllmMetrics:
    """The ``/metrics`` state of one simulated vLLM server (one engine core)."""

    def __init__(
        self,
        *,
        model_name: str,
        max_model_len: int,
        cache_config: Mapping[str, object],
        num_speculative_tokens: int = 0,
    ) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        reg = self.registry
        labels = (model_name, ENGINE)
        # Names, types and help texts come from the panel's one table of vLLM metric
        # families (checked there against the contracts generated from real vLLM).
        kinds = {GAUGE: Gauge, COUNTER: Counter, HISTOGRAM: Histogram}

        def metric(key: str, **kwargs):  # a family of vllm_adapter.metric_names
            f = family(key)
            return kinds[f.type](f.name, f.documentation, [*LABELNAMES, *f.labels],
                                 registry=reg, **kwargs)  # fmt: skip

        # Children are bound up front so every series exists (at 0) from the first
        # scrape, as on a real server.
        self._running = metric("running").labels(*labels)
        self._waiting = metric("waiting").labels(*labels)
        self._kv_usage = metric("kv_usage").labels(*labels)
        for child in (self._running, self._waiting, self._kv_usage):
            child.set(0)

        info = {str(k): str(v) for k, v in cache_config.items()}
        info.pop("engine", None)
        cache_info = family("cache_config")
        info_gauge = Gauge(
            cache_info.name, cache_info.documentation, [*info, "engine"], registry=reg
        )
        info_gauge.labels(**info, engine=ENGINE).set(1)

        self._prefix_queries = metric("prefix_queries").labels(*labels)
        self._prefix_hits = metric("prefix_hits").labels(*labels)
        self._preemptions = metric("preemptions").labels(*labels)
        self._prompt_tokens = metric("prompt_tokens").labels(*labels)
        self._generation_tokens = metric("generation_tokens").labels(*labels)
        self._success_family = metric("request_success")
        self._success = {
            reason: self._success_family.labels(*labels, reason) for reason in FINISH_REASONS
        }

        def histogram(key: str, buckets) -> object:
            return metric(key, buckets=buckets).labels(*labels)

        token_buckets = build_1_2_5_buckets(max_model_len)
        self._req_prompt_tokens = histogram("request_prompt_tokens", token_buckets)
        self._req_generation_tokens = histogram("request_generation_tokens", token_buckets)
        self._iteration_tokens = histogram("iteration_tokens", ITERATION_TOKENS_BUCKETS)
        self._ttft = histogram("ttft", TTFT_BUCKETS)
        self._itl = histogram("itl", PER_TOKEN_BUCKETS)
        self._tpot = histogram("request_tpot", PER_TOKEN_BUCKETS)
        self._e2e = histogram("e2e", REQUEST_LATENCY_BUCKETS)
        self._queue = histogram("queue", REQUEST_LATENCY_BUCKETS)
        self._inference = histogram("inference", REQUEST_LATENCY_BUCKETS)
        self._prefill = histogram("prefill", REQUEST_LATENCY_BUCKETS)
        self._decode = histogram("decode", REQUEST_LATENCY_BUCKETS)

        # Speculative decoding's counters exist only on a server that drafts, one
        # per-position series per draft position (SpecDecodingProm).
        self._spec = None
        if num_speculative_tokens > 0:
            per_pos = metric("spec_accepted_per_pos")
            self._spec = (
                metric("spec_drafts").labels(*labels),
                metric("spec_draft_tokens").labels(*labels),
                metric("spec_accepted").labels(*labels),
                [per_pos.labels(*labels, str(i)) for i in range(num_speculative_tokens)],
            )

    # -- scheduler state (set every engine step) ------------------------------------

    def set_queue(self, *, running: int, waiting: int) -> None:
        self._running.set(running)
        self._waiting.set(waiting)

    def set_kv_usage(self, fraction: float) -> None:
        """KV-cache usage as a fraction of the blocks in use, 0 to 1 (not percent)."""
        self._kv_usage.set(min(1.0, max(0.0, fraction)))

    # -- counters ---------------------------------------------------------------------

    def add_prompt_tokens(self, n: int) -> None:
        """Prompt tokens; vLLM V1 adds a request's prompt length in the engine step
        that completes its prefill."""
        self._prompt_tokens.inc(n)

    def add_generation_tokens(self, n: int) -> None:
        """Output tokens produced, added every engine step."""
        self._generation_tokens.inc(n)

    def add_preemptions(self, n: int = 1) -> None:
        self._preemptions.inc(n)

    def add_prefix_cache(self, *, queries: int, hits: int) -> None:
        """Prefix-cache lookups in tokens, as vLLM counts them: ``queries`` prompt tokens
        looked up, ``hits`` of them found in the cache."""
        self._prefix_queries.inc(queries)
        self._prefix_hits.inc(hits)

    def observe_draft(self, drafted: int, accepted: int) -> None:
        """One sequence's draft in one step: `drafted` tokens proposed, the first
        `accepted` of them kept (SpecDecodingStats.observe_draft)."""
        if self._spec is None:
            return
        drafts, draft_tokens, accepted_tokens, per_pos = self._spec
        drafts.inc()
        draft_tokens.inc(drafted)
        accepted_tokens.inc(accepted)
        for counter in per_pos[:accepted]:
            counter.inc()

    # -- per-step and per-token observations -----------------------------------------

    def observe_iteration_tokens(self, n: int) -> None:
        """One engine step with outputs: the prompt tokens computed by the prefills that
        finished in it plus the tokens it generated, as vLLM's
        ``vllm:iteration_tokens_total`` histogram (a histogram despite the name; a step
        that only advances a chunked prefill has no outputs and is not observed)."""
        self._iteration_tokens.observe(n)

    def observe_ttft(self, seconds: float) -> None:
        """Time to first token, observed when the first token is produced (as vLLM)."""
        self._ttft.observe(seconds)

    def observe_inter_token(self, seconds: float) -> None:
        """Gap between two consecutive output tokens of one request."""
        self._itl.observe(seconds)

    # -- finished requests ------------------------------------------------------------

    def observe_finished(
        self,
        *,
        finished_reason: str,
        prompt_tokens: int,
        generation_tokens: int,
        queue_s: float,
        prefill_s: float,
        decode_s: float,
        e2e_s: float,
        ttft_s: float | None = None,
    ) -> None:
        """Record one finished request, as vLLM does in ``record()``.

        ``ttft_s`` is accepted so call sites can pass a request's full timing, but it
        is NOT observed here: TTFT belongs to ``observe_ttft`` at the first token, and
        observing it again here would count it twice.

        Inference time is ``prefill_s + decode_s`` (first scheduled to last token).
        The mean time per output token excludes the first token, which prefill
        produced: ``decode_s / (generation_tokens - 1)``, and 0 for a request with at
        most one output token; vLLM observes that 0 too rather than skipping it.
        """
        success = self._success.get(finished_reason)
        if success is None:
            # An unknown reason still counts, in its own series, rather than vanishing.
            success = self._success_family.labels(self.model_name, ENGINE, finished_reason)
            self._success[finished_reason] = success
        success.inc()
        self._e2e.observe(e2e_s)
        self._queue.observe(queue_s)
        self._prefill.observe(prefill_s)
        self._inference.observe(prefill_s + decode_s)
        self._decode.observe(decode_s)
        self._req_prompt_tokens.observe(prompt_tokens)
        self._req_generation_tokens.observe(generation_tokens)
        tpot = decode_s / (generation_tokens - 1) if generation_tokens > 1 else 0.0
        self._tpot.observe(tpot)

    # -- exposition -------------------------------------------------------------------

    def render(self) -> bytes:
        """The Prometheus text exposition of every series; serve with ``CONTENT_TYPE``."""
        return generate_latest(self.registry)

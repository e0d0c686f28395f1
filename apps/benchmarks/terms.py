"""The words the benchmark results pages use, each with what it means.

One table: the `{% term "word" %}` tag (apps/benchmarks/templatetags/bench_terms.py) shows
a word with its definition on hover and focus, and the pages' "How these numbers are
defined" list is rendered from the same entries, so a word on a results page and its
definition cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.text import slugify

from apps.benchmarks.harness.arrivals import (
    SATURATION_FLOOR,
    SATURATION_SLOPE,
    SATURATION_WINDOW,
)
from apps.benchmarks.harness.stats import (
    DECODE_MIN_TOKENS,
    DECODE_MIN_WALL_S,
    ITL_BURST_RATIO,
    SATURATION_LAG_MS,
)


@dataclass(frozen=True)
class Term:
    word: str
    definition: str

    @property
    def slug(self) -> str:
        return "term-" + slugify(self.word.replace("/", " per ").replace("%", " percent"))


_MIN_MS = f"{DECODE_MIN_WALL_S * 1000:g}"
_LAG_MS = f"{SATURATION_LAG_MS:g}"

TERMS: tuple[Term, ...] = (
    # What is measured
    Term(
        "TTFT",
        "Time to first token: from sending the request to the first streamed chunk "
        "that carries generated text (not the role-only chunk). Includes queueing and "
        "transport.",
    ),
    Term("E2E", "End to end: from sending the request to the last token-bearing chunk."),
    Term(
        "TPOT",
        "Time per output token = (E2E − TTFT) / (output tokens − 1); decode tok/s "
        "= 1 / TPOT, per user.",
    ),
    Term(
        "ITL",
        "Inter-token latency: the gaps between token-bearing chunks, divided by the "
        "tokens each carries.",
    ),
    Term("prefill tok/s", "Prompt tokens / TTFT (the client's view)."),
    Term(
        "decode tok/s",
        "Generated tokens per second for one user after the first: "
        "(output tokens − 1) / (E2E − TTFT), the median of the level's requests.",
    ),
    Term(
        "output tok/s",
        "All generated tokens of a level divided by its steady-state window "
        "(first measured send to last measured completion): the aggregate throughput.",
    ),
    Term("req/s", "Completed requests per second over the level's steady-state window."),
    Term("goodput", "Requests per second that met the suite's SLO (TTFT and TPOT bounds)."),
    Term(
        "p50 / p95 / p99",
        "Percentiles over the level's measured requests: half, 95 % and "
        "99 % of them were at or below this value (warm-up requests excluded).",
    ),
    # How it is judged
    Term(
        "roofline %",
        "Decode tok/s as a share of the planner's single-stream ceiling for "
        "this recipe on this host (memory bandwidth ÷ bytes read per generated token).",
    ),
    Term(
        "implausible",
        "Above 100 % of the roofline: one stream cannot read the weights "
        "faster than the memory allows, so the number is wrong (a different model, "
        "speculative decoding, or a measurement error) — not a fast result.",
    ),
    Term(
        "too short to time",
        f"Fewer than {DECODE_MIN_TOKENS} generated tokens per request, "
        f"or under {_MIN_MS} ms of wall-clock decode: the time between the first and the "
        "last token is scheduling and transport noise, not a decode rate. No rate, no "
        "roofline, no chart point and no capacity credit is given; exports say "
        "decode_timed: false.",
    ),
    Term(
        "capacity",
        "The largest measured concurrency of the sweep whose TTFT p95 and "
        "per-user decode tok/s both meet the suite's SLO; only levels with a timed decode "
        "rate count.",
    ),
    Term(
        "SLO",
        "The suite's service-level objective: a TTFT p95 bound and a TPOT bound "
        "(shown as the per-user tok/s it implies). Operators edit it on the suite.",
    ),
    Term(
        "partial",
        "The level was cut short (a cancel or a crash): fewer measured requests "
        "than the suite asked for.",
    ),
    Term(
        "seed",
        "The published reference (SPEC §4): the official vLLM-on-Spark evaluation "
        "of Nemotron-3-Super-120B-A12B-NVFP4 on one Spark, single stream. Shown only for "
        "that model and the scenarios it measured.",
    ),
    Term(
        "no published reference",
        "The suite's scenarios have published figures, but for "
        "another model: nothing published to put beside this model's rows.",
    ),
    Term(
        "inconsistent",
        "A published figure that does not add up by the table's own "
        "definitions; shown as published, with what is wrong with it.",
    ),
    # Two different things that once shared the word "saturated"
    Term(
        "saturated",
        "Request-rate sweep: the level's backlog of unanswered requests grew without "
        f"bound (over the last {SATURATION_WINDOW} arrivals by at least "
        f"{SATURATION_SLOPE:g} of a request per arrival, to {SATURATION_FLOOR} or more): "
        "the server fell behind, the level ended early and higher rates were not run. "
        "Exports say saturated: true.",
    ),
    # What the load generator says about itself
    Term(
        "client lag",
        f"With more than one stream, the load generator's event loop lagged "
        f"(p99 over {_LAG_MS} ms): the client, not the server, may have been the limit and "
        'the latencies may be inflated. Exports say client_flag: "client lag".',
    ),
    Term(
        "busy machine",
        f"At one stream the load generator has next to nothing to do, yet "
        f"its event loop lagged (p99 over {_LAG_MS} ms): something else kept the machine "
        "it ran on busy, and the latencies may be inflated. Not the server's fault. "
        'Exports say client_flag: "busy machine".',
    ),
    Term(
        "ITL from bursts",
        "The client lagged and the level's median inter-token latency is under "
        f"{ITL_BURST_RATIO:.0%} of its median TPOT: most chunks were read several at once "
        "and dated alike, so the gaps between them are the client's, not the server's "
        "pace. Its ITL figures say nothing about the server; TPOT (first to last token) "
        "still holds. Exports say itl_from_bursts: true.",
    ),
    Term(
        "vs server",
        "Client overhead: the mean TTFT the client measured minus the mean the "
        "server's /metrics recorded for the same requests (transport and client).",
    ),
)

_BY_WORD = {t.word.lower(): t for t in TERMS}


def get(word: str) -> Term:
    """The term for `word` (any case); a word without a definition is a bug: KeyError."""
    try:
        return _BY_WORD[word.lower()]
    except KeyError:
        raise KeyError(f"no definition for the results word {word!r} in terms.py") from None


def definition(word: str) -> str:
    return get(word).definition

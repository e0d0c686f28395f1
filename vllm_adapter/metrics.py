"""Scrape a vLLM server's Prometheus ``/metrics`` and derive the numbers the panel shows.

Pure Python (no Django), in three layers so each can be tested on its own:

- ``fetch_metrics(url)``: one bounded HTTP GET. Never raises; never takes much longer
  than ``timeout`` (httpx's per-phase timeouts, a deadline checked while streaming the
  body, and a watchdog that shuts the socket down at the deadline, so a target that
  stalls after sending half a body cannot hold the caller); never reads more than
  ``max_bytes``; refuses error statuses and HTML pages (a proxy's or login page's answer).
- ``parse(text)``: Prometheus text to a ``Snapshot``. Never raises: a body cut short or
  damaged is parsed line by line, the broken lines are dropped and named in
  ``Snapshot.errors``. Accepts vLLM's current metric names and the older ones (SPEC §3),
  counters with or without ``_total``, and sums the series of several engines. The names
  come from the one table in ``vllm_adapter.metric_names``. (``totals(text, reader)``:
  the strict sums the benchmark harness's server cross-check compares.)
- ``Deriver``: fed one ``(monotonic time, Snapshot)`` per scrape, it turns cumulative
  counters and histograms into rates, windowed percentiles and hit rates.

"Unknown" is ``None`` everywhere, never 0: a missing series, a failed scrape, a window
without observations, a counter that went backwards. 0 means "measured, and zero".

Counter resets (vLLM restarted, so its counters start again from 0) are detected by a
decrease between two consecutive snapshots, and handled thus:

- rates between the last two snapshots (``prompt_tps``, ``generation_tps``): the
  interval that contains a reset has an *unknown* rate (``None``): when in it the
  restart happened, and so over how long the new counts were made, is not known;
- windowed deltas (percentiles, ``prefix_hit_rate``, ``preemptions``): the interval that
  contains a reset counts from zero, as Prometheus' ``increase()`` does: everything the
  restarted server counted was observed after the previous snapshot, so inside the
  window. Intervals on either side are counted normally. Never negative.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from itertools import pairwise
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from vllm_adapter import metric_names

__all__ = [
    "DEFAULT_WINDOW_S",
    "HTML_ERROR",
    "SAMPLE_KEYS",
    "Deriver",
    "FetchResult",
    "Histogram",
    "Snapshot",
    "fetch_metrics",
    "histogram_quantile",
    "parse",
    "scrape",
    "totals",
]

HTML_ERROR = "not Prometheus text (an HTML page)"
DEFAULT_WINDOW_S = 60.0
# Snapshot.errors keeps the first few problems; a page of garbage would otherwise give
# one error per line.
MAX_ERRORS = 20
MAX_BAD_LINES = 200


# --- fetching ------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchResult:
    """One scrape. ``ok`` means a 200 with a body that may be Prometheus text (``text``
    set, ``error`` None); otherwise ``error`` says why, in words for a person, and
    ``status`` is the HTTP status when one arrived."""

    ok: bool
    text: str | None
    error: str | None
    elapsed_s: float
    status: int | None


class _Watchdog:
    """Shuts the request's socket down at the deadline, from a timer thread.

    httpx's timeouts are per phase and per read (a server that answers its headers just
    before the timeout and then stalls would hold the caller for twice ``timeout``), so
    the total is enforced here: a ``shutdown()`` wakes a read blocked in another thread,
    which then fails and is reported as a timeout. The socket is caught as soon as it
    is connected (httpcore's ``trace`` extension), or from the response for a connection
    reused from a client's pool.
    """

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._done = False
        self.fired = False
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            # After this the timer can no longer touch the socket, which a shared
            # client's pool may hand to the next request.
            self._done = True
        self._timer.cancel()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            self.attach(info.get("return_value"))

    def attach(self, stream: Any) -> None:
        sock = None
        with contextlib.suppress(Exception):
            sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        with self._lock:
            self._sock = sock
            if self.fired and not self._done:
                self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                self._sock.shutdown(socket.SHUT_RDWR)


def _looks_like_html(body: bytes) -> bool:
    head = body[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or (
        head.startswith(b"<") and b"<html" in head
    )


def fetch_metrics(
    url: str,
    *,
    timeout: float = 2.0,
    max_bytes: int = 2_000_000,
    client: httpx.Client | None = None,
) -> FetchResult:
    """GET ``url`` (a ``/metrics`` endpoint) within ``timeout`` seconds in total.

    Never raises. Errors (``ok=False``): a connection failure; ``"timed out after N s"``;
    ``"HTTP <status> <reason>"`` for any status but 200; ``"too large: ..."`` once the
    body passes ``max_bytes`` (or says it will, by Content-Length), without reading the
    rest; ``HTML_ERROR`` when the content type is text/html or the body is an HTML page.
    A ``client`` may be passed to reuse connections; its own timeouts are overridden.
    Without one, a client is made for the call, ignoring proxy variables (the servers
    are on the LAN) and not following redirects.
    """
    start = time.monotonic()
    deadline = start + timeout
    status: int | None = None

    def result(error: str | None, text: str | None = None) -> FetchResult:
        return FetchResult(
            ok=error is None,
            text=text if error is None else None,
            error=error,
            elapsed_s=time.monotonic() - start,
            status=status,
        )

    timed_out = f"timed out after {timeout:g} s"
    own_client = client is None
    watchdog = _Watchdog(timeout)
    try:
        if client is None:
            client = httpx.Client(trust_env=False, follow_redirects=False)
        with (
            watchdog,
            client.stream(
                "GET",
                url,
                headers={"accept": "text/plain"},
                timeout=httpx.Timeout(timeout),
                extensions={"trace": watchdog.trace},
            ) as response,
        ):
            watchdog.attach(response.extensions.get("network_stream"))
            status = response.status_code
            if status != 200:
                return result(f"HTTP {status} {response.reason_phrase}".strip())
            content_type = response.headers.get("content-type", "").lower()
            if "text/html" in content_type or "application/xhtml" in content_type:
                return result(HTML_ERROR)
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                return result(f"too large: {int(declared)} bytes, more than {max_bytes}")
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    return result(f"too large: more than {max_bytes} bytes")
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    return result(timed_out)
        if watchdog.fired:
            # A body that ends at connection close reads as complete when the watchdog
            # shuts the socket: it is cut, not complete.
            return result(timed_out)
        body = b"".join(chunks)
        if _looks_like_html(body):
            return result(HTML_ERROR)
        return result(None, body.decode("utf-8", errors="replace"))
    except httpx.TimeoutException:
        return result(timed_out)
    except Exception as exc:  # never raise: a scrape that fails is a value, not a crash
        if watchdog.fired:
            return result(timed_out)
        if isinstance(exc, httpx.ConnectError):
            return result(f"cannot connect: {exc}")
        return result(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    finally:
        if own_client and client is not None:
            client.close()


# --- parsing -------------------------------------------------------------------------


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram: upper bound (``math.inf`` for +Inf, always present) to
    cumulative count, in ascending order of bound; plus ``_sum`` and ``_count``."""

    buckets: dict[float, float]
    sum: float | None
    count: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "buckets", dict(sorted(self.buckets.items())))


@dataclass
class Snapshot:
    """What one ``/metrics`` body says, summed over the server's engines.

    Every value is None when its series is missing. Gauges: ``running`` and ``waiting``
    requests (summed over engines), ``kv_usage`` (0–1, the mean over engines: each
    engine has its own, equally sized KV cache). Counters are cumulative since the
    server started. ``errors`` lists what could not be parsed.
    """

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    request_success: float | None = None
    request_success_by_reason: dict[str, float] = field(default_factory=dict)
    ttft: Histogram | None = None
    itl: Histogram | None = None
    e2e: Histogram | None = None
    # Speculative decoding (only a server started with --speculative-config has them):
    # drafts, drafted and accepted tokens, and accepted tokens by draft position.
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted: float | None = None
    spec_accepted_per_pos: dict[int, float] | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def spec_acceptance_rate(self) -> float | None:
        """Accepted ÷ drafted tokens since the server started (vLLM's "Avg Draft
        acceptance rate"), 0–1; None without speculative decoding or before a draft."""
        return acceptance(self.spec_drafts, self.spec_draft_tokens, self.spec_accepted)[0]

    @property
    def spec_mean_acceptance_length(self) -> float | None:
        """1 + accepted tokens per draft: the tokens a verified step gives a sequence."""
        return acceptance(self.spec_drafts, self.spec_draft_tokens, self.spec_accepted)[1]

    @property
    def spec_per_position(self) -> list[float] | None:
        """Each draft position's unconditional acceptance rate (accepted there ÷ drafts)."""
        if not self.spec_drafts or not self.spec_accepted_per_pos:
            return None
        top = max(self.spec_accepted_per_pos) + 1
        return [self.spec_accepted_per_pos.get(i, 0.0) / self.spec_drafts for i in range(top)]

    @property
    def empty(self) -> bool:
        """True when not one of the values is known (an unusable scrape)."""
        return all(
            getattr(self, f.name) is None
            for f in fields(self)
            if f.name not in ("errors", "request_success_by_reason")
        )


# Names from the one table (``metric_names``), the current one first (SPEC §3). Counters
# are looked up with and without ``_total``; the first name with any series wins, so a
# server that exposes both a current and a deprecated name is not counted twice.
_GAUGES = metric_names.read_by(metric_names.TELEMETRY, metric_names.GAUGE)
_COUNTERS = metric_names.read_by(metric_names.TELEMETRY, metric_names.COUNTER)
_HISTOGRAMS = metric_names.read_by(metric_names.TELEMETRY, metric_names.HISTOGRAM)
_REASON_LABEL = metric_names.family("request_success").labels[0]  # finished_reason
_POSITION_LABEL = metric_names.family("spec_accepted_per_pos").labels[0]  # position
MAX_SPEC_POSITIONS = 128  # vLLM's MAX_SPEC_LEN: a label beyond it is not a draft position


def acceptance(
    drafts: float | None, draft_tokens: float | None, accepted: float | None
) -> tuple[float | None, float | None]:
    """(acceptance rate 0–1, mean acceptance length) from speculative decoding's counters
    (or their differences over a window), as vLLM's SpecDecodingLogging computes them;
    (None, None) without drafts."""
    if not drafts or not draft_tokens or accepted is None:
        return None, None
    return accepted / draft_tokens, 1 + accepted / drafts


# Gauges averaged over engines rather than summed.
_MEAN_GAUGES = frozenset({"kv_usage"})

_Sample = tuple[str, dict[str, str], float]


def _samples_of(text: str) -> list[_Sample]:
    return [
        (s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def _try_samples(text: str) -> list[_Sample] | None:
    """The samples of ``text``, or None if any part of it does not parse."""
    try:
        return _samples_of(text)
    except Exception:
        return None


def _tolerant_samples(text: str, errors: list[str]) -> list[_Sample]:
    """Every sample that parses; the lines that do not are named in ``errors``.

    A last line without its newline is dropped first: the body was cut, and a value cut
    short ("12" of "1234") would parse into a silently wrong number. Then the whole text
    is parsed; if that fails, family by family (a block of ``#`` lines and the samples
    after them), and a family that fails line by line, without its ``#`` lines (they are
    only hints here: metrics are matched by sample name). So one damaged line costs one
    sample, not the scrape. After ``MAX_BAD_LINES`` unparseable lines the rest is left:
    that is not a metrics body, and parsing it all would cost the poller seconds.
    """
    if text and not text.endswith("\n"):
        cut = text.rfind("\n") + 1
        tail = text[cut:]
        text = text[:cut]
        if tail.strip():
            errors.append(f"body truncated: dropped the incomplete last line {tail[:80]!r}")
    if not text.strip():
        errors.append("empty body")
        return []
    whole = _try_samples(text)
    if whole is not None:
        return whole
    samples: list[_Sample] = []

    blocks: list[list[tuple[int, str]]] = [[]]
    in_samples = False
    for number, line in enumerate(text.splitlines(), start=1):
        is_comment = line.lstrip().startswith("#")
        if is_comment and in_samples:
            blocks.append([])
        if line.strip():
            in_samples = not is_comment
        blocks[-1].append((number, line))
    bad = 0
    for block in blocks:
        parsed = _try_samples("".join(line + "\n" for _, line in block))
        if parsed is not None:
            samples.extend(parsed)
            continue
        # Line by line, without the # lines: one damaged line costs one sample.
        for number, line in block:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            parsed = _try_samples(stripped + "\n")
            if parsed is not None:
                samples.extend(parsed)
                continue
            bad += 1
            errors.append(f"line {number}: cannot parse {stripped[:80]!r}")
            if bad >= MAX_BAD_LINES:
                errors.append(f"gave up after {bad} unparseable lines (line {number})")
                return samples
    return samples


def _finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


def _series(samples: Sequence[_Sample], names: Iterable[str]) -> list[_Sample]:
    """The samples of the first name in ``names`` that has any."""
    for name in names:
        found = [s for s in samples if s[0] == name and _finite(s[2])]
        if found:
            return found
    return []


def _counter_names(bases: Iterable[str]) -> Iterator[str]:
    for base in bases:
        yield base + "_total"
        yield base


def _histogram(
    samples: Sequence[_Sample], names: Iterable[str], errors: list[str]
) -> Histogram | None:
    for name in names:
        buckets: dict[float, float] = {}
        total_sum: float | None = None
        total_count: float | None = None
        seen = False
        for sample_name, labels, value in samples:
            if sample_name == name + "_bucket":
                seen = True
                try:
                    bound = float(labels.get("le", ""))
                except ValueError:
                    continue
                if _finite(value) and not math.isnan(bound):
                    buckets[bound] = buckets.get(bound, 0.0) + value
            elif sample_name == name + "_sum" and _finite(value):
                seen = True
                total_sum = (total_sum or 0.0) + value
            elif sample_name == name + "_count" and _finite(value):
                seen = True
                total_count = (total_count or 0.0) + value
        if not seen:
            continue
        if math.inf not in buckets:
            errors.append(f"{name}: incomplete histogram (no +Inf bucket), ignored")
            return None
        count = buckets[math.inf] if total_count is None else total_count
        return Histogram(buckets=buckets, sum=total_sum, count=count)
    return None


def parse(text: str) -> Snapshot:
    """Parse a ``/metrics`` body into a Snapshot; never raises (see ``Snapshot.errors``)."""
    errors: list[str] = []
    try:
        samples = _tolerant_samples(text or "", errors)
    except Exception as exc:  # a parser bug must not take the poller down
        errors.append(f"{type(exc).__name__}: {exc}")
        samples = []
    values: dict[str, Any] = {}
    for key, names in _GAUGES.items():
        found = _series(samples, names)
        if found:
            total = sum(s[2] for s in found)
            values[key] = total / len(found) if key in _MEAN_GAUGES else total
    for key, names in _COUNTERS.items():
        found = _series(samples, _counter_names(names))
        if found:
            values[key] = sum(s[2] for s in found)
            if key == "request_success":
                by_reason: dict[str, float] = {}
                for _, labels, value in found:
                    reason = labels.get(_REASON_LABEL, "")
                    by_reason[reason] = by_reason.get(reason, 0.0) + value
                values["request_success_by_reason"] = by_reason
            elif key == "spec_accepted_per_pos":
                by_position: dict[int, float] = {}
                for _, labels, value in found:
                    try:
                        position = int(labels.get(_POSITION_LABEL, ""))
                    except ValueError:
                        continue
                    if 0 <= position < MAX_SPEC_POSITIONS:
                        by_position[position] = by_position.get(position, 0.0) + value
                values[key] = by_position
    for key, names in _HISTOGRAMS.items():
        values[key] = _histogram(samples, names, errors)
    if len(errors) > MAX_ERRORS:
        errors = [*errors[:MAX_ERRORS], f"... and {len(errors) - MAX_ERRORS} more errors"]
    snapshot = Snapshot(**values, errors=errors)
    if snapshot.empty and not errors:
        errors.append("no vLLM metrics in the body" if samples else "no samples in the body")
    return snapshot


def totals(text: str, reader: str) -> dict[str, Any]:
    """The histograms and counters ``reader`` reads (``metric_names.read_by``), summed
    over label sets (engines), from a ``/metrics`` body: ``{key: {"sum", "count",
    "metric"}}`` for a histogram (``metric``: the name found, current or older) and
    ``{key: value}`` for a counter. A family without series is left out.

    Strict, unlike ``parse``: text that does not parse raises ValueError (the benchmark
    harness's before/after cross-check needs both bodies whole, or says why not).
    """
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    out: dict[str, Any] = {}
    for key, names in metric_names.read_by(reader, metric_names.HISTOGRAM).items():
        for name in names:
            if name + "_count" in sums:
                out[key] = {"sum": sums.get(name + "_sum", 0.0), "count": sums[name + "_count"],
                            "metric": name}  # fmt: skip
                break
    for key, names in metric_names.read_by(reader, metric_names.COUNTER).items():
        for name in names:
            value = sums.get(name + "_total", sums.get(name))
            if value is not None:
                out[key] = value
                break
    return out


def scrape(url: str, **kwargs: Any) -> tuple[FetchResult, Snapshot | None]:
    """``fetch_metrics`` then ``parse``; the Snapshot is None when the fetch failed."""
    fetched = fetch_metrics(url, **kwargs)
    return fetched, (parse(fetched.text or "") if fetched.ok else None)


# --- deriving ------------------------------------------------------------------------


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The ``q`` quantile (0–1) of cumulative ``buckets`` (bound to count, +Inf included),
    interpolating linearly inside the bucket, as Prometheus' ``histogram_quantile``.

    None when there are no observations or no +Inf bucket. A quantile that falls in
    the +Inf bucket is the highest finite bound; the lowest bucket's lower bound is 0
    (when its upper bound is positive).
    """
    if not buckets or math.inf not in buckets or not 0 <= q <= 1:
        return None
    bounds = sorted(buckets)
    counts: list[float] = []
    running_max = 0.0
    for bound in bounds:  # tolerate float noise that makes counts non-monotonic
        running_max = max(running_max, buckets[bound])
        counts.append(running_max)
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, c in enumerate(counts) if c >= rank)
    if bounds[index] == math.inf:
        return bounds[-2] if len(bounds) >= 2 else None
    upper = bounds[index]
    if index == 0:
        if upper <= 0:
            return upper
        lower, below = 0.0, 0.0
    else:
        lower, below = bounds[index - 1], counts[index - 1]
    in_bucket = counts[index] - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def _counter_increase(values: Sequence[float]) -> float | None:
    """Total increase over consecutive readings; an interval with a decrease (a reset)
    counts from zero. None with fewer than two readings."""
    if len(values) < 2:
        return None
    return sum(b - a if b >= a else b for a, b in pairwise(values))


def _histogram_increase(hists: Sequence[Histogram]) -> dict[float, float] | None:
    """Bucket-wise increase over consecutive histograms, reset-aware like
    ``_counter_increase``. A change of bucket bounds (a restarted, upgraded server) is a
    reset and restarts the sum with the new bounds."""
    if len(hists) < 2:
        return None
    total: dict[float, float] | None = None
    for a, b in pairwise(hists):
        same_bounds = a.buckets.keys() == b.buckets.keys()
        reset = not same_bounds or any(b.buckets[k] < a.buckets[k] for k in b.buckets)
        step = dict(b.buckets) if reset else {k: b.buckets[k] - a.buckets[k] for k in b.buckets}
        if total is None or total.keys() != step.keys():
            total = step
        else:
            total = {k: total[k] + step[k] for k in total}
    return total


SAMPLE_KEYS: tuple[str, ...] = (
    "stale",
    "age_s",
    "window_s",
    "kv_usage_pct",
    "running",
    "waiting",
    "prompt_tps",
    "generation_tps",
    "ttft_p50",
    "ttft_p95",
    "itl_p50",
    "itl_p95",
    "e2e_p50",
    "e2e_p95",
    "prefix_hit_rate",
    "spec_acceptance_rate",
    "spec_acceptance_length",
    "preemptions",
    "preemptions_total",
    "requests_total",
    "errors",
)


class Deriver:
    """Rates and windowed statistics from a series of Snapshots.

    Call ``feed(t, snapshot)`` once per scrape with ``t`` from ``time.monotonic()``;
    ``snapshot`` None (or an empty Snapshot) records a failed scrape. ``sample()`` gives
    a dict with exactly ``SAMPLE_KEYS``:

    - ``stale``: the last scrape failed (or there was none yet); every value is then
      None. ``age_s``: seconds from the last good snapshot to the last feed (None if
      none). ``errors``: the last snapshot's parse errors (or ["scrape failed"]).
    - ``kv_usage_pct`` (0–100), ``running``, ``waiting``, ``preemptions_total``,
      ``requests_total``: the last snapshot's values.
    - ``prompt_tps``, ``generation_tps``: tokens per second between the last two good
      snapshots; None across a counter reset or with only one snapshot. Per second of
      the server's own clock: ``t`` is the wall clock, and a server simulated ``time_scale``
      times faster than real (sparksim's ``--time-scale``) produces that many times more
      tokens per wall second, so the rates are divided by it — what a real Spark would
      do (apps/hosts/clock.py). The histograms' seconds are the server's already.
    - over the window (the good snapshots of the last ``window_s`` seconds;
      ``window_s`` says how many seconds they actually span): ``ttft_p50/p95``,
      ``itl_p50/p95``, ``e2e_p50/p95`` (seconds, from histogram bucket deltas; None
      without observations in the window), ``prefix_hit_rate`` (0–1; None without
      queries), ``spec_acceptance_rate`` (accepted ÷ drafted tokens, 0–1) and
      ``spec_acceptance_length`` (1 + accepted per draft; both None without speculative
      decoding or drafts in the window), ``preemptions`` (how many in the window).

    A value whose series is missing from the newest snapshot is None, even if older
    snapshots had it.
    """

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, time_scale: float = 1.0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, not {window_s}")
        if not time_scale > 0:
            raise ValueError(f"time_scale must be positive, not {time_scale}")
        self.window_s = window_s
        self.time_scale = time_scale
        self._good: deque[tuple[float, Snapshot]] = deque()
        self._last_t: float | None = None
        self._stale = True
        self._errors: list[str] = []

    def feed(self, t: float, snapshot: Snapshot | None) -> None:
        if self._last_t is not None and t < self._last_t:
            self._good.clear()  # the clock went backwards: start over rather than guess
        self._last_t = t
        if snapshot is None or snapshot.empty:
            self._stale = True
            self._errors = list(snapshot.errors) if snapshot is not None else []
            if not self._errors:
                self._errors = ["scrape failed"]
            return
        self._stale = False
        self._errors = list(snapshot.errors)
        self._good.append((t, snapshot))
        # Keep what the window needs, and always the previous snapshot for the rates.
        while len(self._good) > 2 and self._good[1][0] <= t - self.window_s:
            self._good.popleft()

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = dict.fromkeys(SAMPLE_KEYS)
        out["stale"] = self._stale
        out["errors"] = list(self._errors)
        if self._good and self._last_t is not None:
            out["age_s"] = self._last_t - self._good[-1][0]
        if self._stale or not self._good:
            return out
        t_new, new = self._good[-1]
        window = [(t, s) for t, s in self._good if t >= t_new - self.window_s]
        out["window_s"] = t_new - window[0][0]

        if new.kv_usage is not None:
            out["kv_usage_pct"] = new.kv_usage * 100
        for key in ("running", "waiting"):
            value = getattr(new, key)
            out[key] = round(value) if value is not None else None
        out["preemptions_total"] = new.preemptions
        out["requests_total"] = new.request_success

        if len(self._good) >= 2:
            t_old, old = self._good[-2]
            dt = t_new - t_old
            if 0 < dt <= self.window_s:
                for key, attr in (
                    ("prompt_tps", "prompt_tokens"),
                    ("generation_tps", "generation_tokens"),
                ):
                    a, b = getattr(old, attr), getattr(new, attr)
                    if a is not None and b is not None and b >= a:
                        out[key] = (b - a) / (dt * self.time_scale)

        for prefix, attr in (("ttft", "ttft"), ("itl", "itl"), ("e2e", "e2e")):
            if getattr(new, attr) is None:
                continue
            hists = [h for _, s in window if (h := getattr(s, attr)) is not None]
            delta = _histogram_increase(hists)
            if delta is not None:
                out[f"{prefix}_p50"] = histogram_quantile(0.5, delta)
                out[f"{prefix}_p95"] = histogram_quantile(0.95, delta)

        if new.prefix_queries is not None and new.prefix_hits is not None:
            pairs = [
                (s.prefix_hits, s.prefix_queries)
                for _, s in window
                if s.prefix_hits is not None and s.prefix_queries is not None
            ]
            hits = _counter_increase([h for h, _ in pairs])
            queries = _counter_increase([q for _, q in pairs])
            if hits is not None and queries:
                out["prefix_hit_rate"] = min(1.0, max(0.0, hits / queries))

        if new.spec_drafts is not None:
            rows = [
                (s.spec_drafts, s.spec_draft_tokens, s.spec_accepted)
                for _, s in window
                if None not in (s.spec_drafts, s.spec_draft_tokens, s.spec_accepted)
            ]
            increases = [_counter_increase([r[i] for r in rows]) for i in range(3)]
            rate, length = acceptance(*increases)
            out["spec_acceptance_rate"], out["spec_acceptance_length"] = rate, length

        if new.preemptions is not None:
            out["preemptions"] = _counter_increase(
                [s.preemptions for _, s in window if s.preemptions is not None]
            )
        return out

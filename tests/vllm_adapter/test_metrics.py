"""vllm_adapter.metrics: fetching, parsing and deriving vLLM's /metrics, against a real
sparksim and against tiny local servers that misbehave. Only 127.0.0.1 is contacted."""

from __future__ import annotations

import contextlib
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from sparksim.faults import mangle_metrics
from tests.sparksim.conftest import NEMOTRON, NEMOTRON_FLAGS, launch
from vllm_adapter import metric_names
from vllm_adapter.metrics import (
    HTML_ERROR,
    SAMPLE_KEYS,
    Deriver,
    Histogram,
    Snapshot,
    fetch_metrics,
    histogram_quantile,
    parse,
    scrape,
    totals,
)

INF = math.inf
WINDOWED = ("ttft_p50", "ttft_p95", "itl_p50", "itl_p95", "e2e_p50", "e2e_p95")
VALUES = tuple(k for k in SAMPLE_KEYS if k not in ("stale", "errors"))


# --- a real sparksim -------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = launch(tmp_path_factory.mktemp("sim"), *NEMOTRON_FLAGS, time_scale=20)
    yield sim
    sim.stop()


def _chat(sim, n: int, max_tokens: int) -> int:
    """Send ``n`` chat requests; returns the prompt tokens they used in total."""
    prompt_tokens = 0
    with sim.client() as c:
        for i in range(n):
            reply = c.post(
                "/v1/chat/completions",
                json={
                    "model": NEMOTRON,
                    "messages": [{"role": "user", "content": f"hello number {i}"}],
                    "max_tokens": max_tokens,
                    "ignore_eos": True,
                },
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["usage"]["completion_tokens"] == max_tokens
            prompt_tokens += reply.json()["usage"]["prompt_tokens"]
    return prompt_tokens


def _snapshot(url: str) -> Snapshot:
    fetched, snap = scrape(url + "/metrics")
    assert fetched.ok, fetched.error
    assert fetched.status == 200
    assert snap is not None
    assert snap.errors == []
    return snap


def test_parses_sparksims_metrics_consistently_with_the_requests_made(sim):
    before = _snapshot(sim.url)
    deriver = Deriver()
    t0 = time.monotonic()
    deriver.feed(t0, before)
    prompt_tokens = _chat(sim, 3, max_tokens=5)
    after = _snapshot(sim.url)
    t1 = time.monotonic()
    deriver.feed(t1, after)

    assert after.running == 0 and after.waiting == 0
    assert 0 <= after.kv_usage <= 1
    assert after.generation_tokens - before.generation_tokens == 15
    assert after.prompt_tokens - before.prompt_tokens == prompt_tokens
    assert after.request_success - before.request_success == 3
    assert set(after.request_success_by_reason) == {
        "stop",
        "length",
        "abort",
        "error",
        "repetition",
    }
    assert (
        after.request_success_by_reason["length"] - before.request_success_by_reason["length"] == 3
    )
    assert after.prefix_queries - before.prefix_queries == prompt_tokens
    assert 0 <= after.prefix_hits - before.prefix_hits <= prompt_tokens
    assert after.preemptions == 0
    # One TTFT and one e2e per request, an inter-token latency per token after the first.
    assert after.ttft.count - before.ttft.count == 3
    assert after.e2e.count - before.e2e.count == 3
    assert after.itl.count - before.itl.count == 3 * 4
    for hist in (after.ttft, after.itl, after.e2e):
        assert hist.buckets[INF] == hist.count
        counts = list(hist.buckets.values())
        assert counts == sorted(counts)  # cumulative
        assert hist.sum > 0

    derived = deriver.sample()
    assert tuple(derived) == SAMPLE_KEYS
    assert derived["stale"] is False and derived["errors"] == []
    assert derived["generation_tps"] == pytest.approx(15 / (t1 - t0))
    assert derived["prompt_tps"] == pytest.approx(prompt_tokens / (t1 - t0))
    assert derived["running"] == 0 and derived["waiting"] == 0
    assert derived["kv_usage_pct"] == pytest.approx(after.kv_usage * 100)
    for key in WINDOWED:
        assert derived[key] is not None and derived[key] > 0, key
    assert derived["ttft_p50"] <= derived["ttft_p95"]
    # The e2e latency of a request is at least its TTFT; sparksim answers within seconds.
    assert derived["e2e_p95"] < 10
    assert 0 <= derived["prefix_hit_rate"] <= 1
    assert derived["preemptions"] == 0 and derived["preemptions_total"] == 0


def _to_old_names(text: str) -> str:
    """What an older vLLM exposes: the deprecated names, counters without ``_total``."""
    text = text.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    text = text.replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    text = text.replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
    counters = "prompt_tokens|generation_tokens|num_preemptions|gpu_prefix_cache_queries|gpu_prefix_cache_hits|request_success"
    return re.sub(rf"(vllm:(?:{counters}))_total\b", r"\1", text)


def test_old_metric_names_give_the_same_snapshot(sim):
    _chat(sim, 1, max_tokens=3)
    text = httpx.get(sim.url + "/metrics").text
    old = _to_old_names(text)
    assert "vllm:gpu_cache_usage_perc{" in old and "vllm:kv_cache_usage_perc" not in old
    assert "vllm:prompt_tokens{" in old and "vllm:prompt_tokens_total" not in old
    assert "vllm:time_per_output_token_seconds_bucket{" in old
    current, previous = parse(text), parse(old)
    assert previous.errors == []
    assert previous == current
    assert previous.itl is not None and previous.prefix_queries is not None


# --- parsing by hand -------------------------------------------------------------------

TWO_ENGINES = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 50.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} 2.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 3.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 0.2
"""


def test_series_of_several_engines_are_summed_and_missing_ones_are_none():
    snap = parse(TWO_ENGINES)
    assert snap.errors == []
    assert (snap.running, snap.waiting, snap.prompt_tokens) == (5, 1, 150)
    assert snap.kv_usage == pytest.approx(0.375)  # mean: each engine has its own cache
    assert snap.request_success == 7
    assert snap.request_success_by_reason == {"stop": 6, "length": 1}
    assert snap.ttft == Histogram(buckets={0.1: 4, INF: 5}, sum=pytest.approx(0.7), count=5)
    # Not in the text: unknown, not 0.
    assert snap.generation_tokens is None and snap.preemptions is None
    assert snap.prefix_hits is None and snap.itl is None and snap.e2e is None


def test_a_current_name_wins_over_a_deprecated_one_instead_of_adding_up():
    text = (
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\n'
        'vllm:gpu_cache_usage_perc{engine="0"} 0.9\n'
        'vllm:prompt_tokens_total{engine="0"} 10\n'
        'vllm:prompt_tokens{engine="0"} 99\n'
    )
    snap = parse(text)
    assert (snap.kv_usage, snap.prompt_tokens) == (0.5, 10)


def test_totals_reads_current_and_older_names_and_is_strict():
    text = (
        "# TYPE vllm:time_per_output_token_seconds histogram\n"
        'vllm:time_per_output_token_seconds_bucket{le="+Inf",engine="0"} 4\n'
        'vllm:time_per_output_token_seconds_count{engine="0"} 4\n'
        'vllm:time_per_output_token_seconds_sum{engine="0"} 0.2\n'
        'vllm:prompt_tokens_total{engine="0"} 10\n'
        'vllm:prompt_tokens_total{engine="1"} 5\n'
        'vllm:num_requests_running{engine="0"} 3\n'
    )
    got = totals(text, metric_names.BENCHMARKS)
    assert got == {
        "itl": {"sum": 0.2, "count": 4.0, "metric": "vllm:time_per_output_token_seconds"},
        "prompt_tokens": 15.0,
    }
    assert "running" not in totals(text, metric_names.TELEMETRY)  # gauges are not totals
    with pytest.raises(ValueError):
        totals("vllm:x{ 1\n", metric_names.BENCHMARKS)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "garbage\x00\xff{{{",
        "<html><body>502 Bad Gateway</body></html>",
        "# only a comment\n",
    ],
)
def test_garbage_never_raises_and_gives_an_empty_snapshot_with_errors(text):
    snap = parse(text)
    assert snap.empty
    assert snap.errors


def test_truncated_text_keeps_the_head_and_reports_the_cut():
    full = TWO_ENGINES
    cut = full.index('vllm:request_success_total{engine="0",finished_reason="length"') + 30
    snap = parse(full[:cut])
    assert snap.errors and "truncated" in snap.errors[0]
    assert (snap.running, snap.prompt_tokens) == (5, 150)
    assert snap.request_success == 4  # only the series before the cut
    assert snap.ttft is None


def test_a_value_cut_short_is_dropped_not_read_as_a_smaller_number():
    snap = parse('vllm:num_requests_running{engine="0"} 3\nvllm:prompt_tokens_total{engine="0"} 12')
    assert snap.running == 3
    assert snap.prompt_tokens is None  # "12" may be the start of "1234"
    assert snap.errors


def test_a_histogram_cut_before_its_inf_bucket_is_ignored():
    head = TWO_ENGINES.split('vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"')[0]
    snap = parse(head)
    assert snap.ttft is None
    assert any("+Inf" in e for e in snap.errors)


@pytest.mark.parametrize("mode", ["malformed", "truncated"])
def test_mangled_text_parses_line_tolerantly(sim, mode):
    text = httpx.get(sim.url + "/metrics").text
    snap = parse(mangle_metrics(text, mode))
    assert snap.errors
    assert not snap.empty
    # The head of the body (gauges, then counters) survives either way.
    assert snap.running is not None and snap.kv_usage is not None
    if mode == "malformed":  # one damaged sample costs at most one value, not the scrape
        clean = parse(text)
        differ = [
            f.name
            for f in fields(Snapshot)
            if f.name != "errors" and getattr(snap, f.name) != getattr(clean, f.name)
        ]
        assert len(differ) <= 1, differ


@pytest.mark.parametrize("mode", ["malformed", "truncated"])
def test_sparksims_broken_metrics_fault(tmp_path, mode):
    sim = launch(tmp_path, *NEMOTRON_FLAGS, "--fault", f"metrics:{mode}", time_scale=20)
    try:
        fetched, snap = scrape(sim.url + "/metrics")
    finally:
        sim.stop()
    assert fetched.ok  # the transport worked; the body is what is broken
    assert snap is not None and snap.errors
    assert snap.running is not None
    deriver = Deriver()
    deriver.feed(0.0, snap)
    deriver.feed(1.0, snap)
    derived = deriver.sample()
    assert derived["errors"] == snap.errors
    if mode == "truncated":  # the tail (histograms) is gone: unknown, not 0
        assert all(derived[k] is None for k in WINDOWED)
        assert snap.e2e is None


# --- deriving --------------------------------------------------------------------------


def _snap(**kw) -> Snapshot:
    return Snapshot(**kw)


def _hist(buckets: dict[float, float]) -> Histogram:
    return Histogram(buckets=buckets, sum=None, count=buckets[INF])


def test_rates_come_from_the_last_two_snapshots():
    d = Deriver()
    d.feed(10.0, _snap(prompt_tokens=1000, generation_tokens=200))
    assert d.sample()["generation_tps"] is None  # one snapshot: no rate yet
    d.feed(12.0, _snap(prompt_tokens=1400, generation_tokens=300))
    d.feed(13.0, _snap(prompt_tokens=1400, generation_tokens=350))
    s = d.sample()
    assert s["prompt_tps"] == 0  # measured, and zero
    assert s["generation_tps"] == 50


def test_counter_reset_gives_an_unknown_rate_then_recovers():
    d = Deriver()
    d.feed(0.0, _snap(generation_tokens=1000, preemptions=7))
    d.feed(1.0, _snap(generation_tokens=1100, preemptions=9))
    assert d.sample()["generation_tps"] == 100
    d.feed(2.0, _snap(generation_tokens=50, preemptions=1))  # vLLM restarted
    s = d.sample()
    assert s["generation_tps"] is None  # unknown for the interval with the reset
    # Over the window the reset interval counts from zero: 2 + 1, never negative.
    assert s["preemptions"] == 3 and s["preemptions_total"] == 1
    d.feed(3.0, _snap(generation_tokens=80, preemptions=1))
    s = d.sample()
    assert s["generation_tps"] == 30 and s["preemptions"] == 3


def test_histogram_quantile_interpolates_like_prometheus():
    buckets = {0.1: 1, 0.5: 4, 1.0: 8, INF: 8}
    # rank 4 ends bucket (0.1, 0.5]; rank 7.6 is 3.6 of the 4 in (0.5, 1.0].
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.5)
    assert histogram_quantile(0.95, buckets) == pytest.approx(0.5 + 0.5 * 3.6 / 4)
    # rank 0.5 in the first bucket: from 0 to 0.1.
    assert histogram_quantile(0.0625, buckets) == pytest.approx(0.05)
    # In the +Inf bucket: the highest finite bound.
    assert histogram_quantile(0.99, {0.1: 1, 0.5: 2, INF: 10}) == 0.5
    assert histogram_quantile(0.5, {0.1: 0, INF: 0}) is None
    assert histogram_quantile(0.5, {0.1: 3}) is None  # no +Inf bucket


def test_windowed_quantiles_use_bucket_deltas():
    d = Deriver(window_s=60)
    d.feed(0.0, _snap(ttft=_hist({0.1: 100, 0.5: 100, 1.0: 100, INF: 100})))  # old history
    d.feed(30.0, _snap(ttft=_hist({0.1: 101, 0.5: 102, 1.0: 102, INF: 102})))
    d.feed(60.0, _snap(ttft=_hist({0.1: 101, 0.5: 104, 1.0: 108, INF: 108})))
    s = d.sample()
    # Delta over the window: {0.1: 1, 0.5: 4, 1.0: 8, +Inf: 8}.
    assert s["ttft_p50"] == pytest.approx(0.5)
    assert s["ttft_p95"] == pytest.approx(0.95)
    assert s["window_s"] == 60
    assert s["itl_p50"] is None  # no such histogram
    d.feed(90.0, _snap(ttft=_hist({0.1: 101, 0.5: 104, 1.0: 108, INF: 108})))
    d.feed(120.0, _snap(ttft=_hist({0.1: 101, 0.5: 104, 1.0: 108, INF: 108})))
    s = d.sample()
    assert s["ttft_p50"] is None and s["ttft_p95"] is None  # no observations in the window
    assert s["window_s"] == 60


def test_windowed_quantiles_survive_a_reset():
    d = Deriver(window_s=60)
    d.feed(0.0, _snap(itl=_hist({0.1: 10, 1.0: 10, INF: 10})))
    d.feed(1.0, _snap(itl=_hist({0.1: 12, 1.0: 12, INF: 12})))  # +2 in (0, 0.1]
    d.feed(2.0, _snap(itl=_hist({0.1: 0, 1.0: 2, INF: 2})))  # reset: +2 in (0.1, 1.0]
    d.feed(3.0, _snap(itl=_hist({0.1: 0, 1.0: 2, INF: 2})))
    s = d.sample()
    # Window delta {0.1: 2, 1.0: 4, +Inf: 4}: p50 = rank 2 = 0.1; p95 rank 3.8.
    assert s["itl_p50"] == pytest.approx(0.1)
    assert s["itl_p95"] == pytest.approx(0.1 + 0.9 * 1.8 / 2)


def test_prefix_hit_rate_over_the_window():
    d = Deriver(window_s=10)
    d.feed(0.0, _snap(prefix_queries=1000, prefix_hits=0))
    d.feed(5.0, _snap(prefix_queries=1100, prefix_hits=50))
    d.feed(10.0, _snap(prefix_queries=1200, prefix_hits=150))
    assert d.sample()["prefix_hit_rate"] == pytest.approx(150 / 200)
    d.feed(20.0, _snap(prefix_queries=1200, prefix_hits=150))
    assert d.sample()["prefix_hit_rate"] is None  # no queries in the window


def test_a_failed_scrape_makes_everything_unknown_and_stale():
    d = Deriver()
    assert d.sample()["stale"] is True  # nothing fed yet
    full = _snap(running=1, waiting=0, kv_usage=0.2, prompt_tokens=1, generation_tokens=1)
    d.feed(0.0, full)
    d.feed(1.0, full)
    assert d.sample()["stale"] is False and d.sample()["running"] == 1
    d.feed(2.0, None)
    s = d.sample()
    assert s["stale"] is True and s["errors"] == ["scrape failed"]
    assert s["age_s"] == 1.0
    assert all(s[k] is None for k in VALUES if k != "age_s")
    d.feed(3.0, parse("<html>oops</html>"))  # an empty snapshot is a failed scrape too
    assert d.sample()["stale"] is True and d.sample()["errors"]


def test_a_value_missing_from_the_newest_snapshot_is_unknown():
    d = Deriver()
    d.feed(0.0, _snap(running=2, generation_tokens=10, ttft=_hist({0.1: 1, INF: 1})))
    d.feed(1.0, _snap(running=2, generation_tokens=20, ttft=_hist({0.1: 2, INF: 2})))
    assert d.sample()["ttft_p50"] is not None
    d.feed(2.0, _snap(running=3))  # a truncated scrape: only the head survived
    s = d.sample()
    assert s["running"] == 3 and s["stale"] is False
    assert s["generation_tps"] is None and s["ttft_p50"] is None
    assert s["kv_usage_pct"] is None


# --- fetching from misbehaving local servers -------------------------------------------

GOOD_BODY = b'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>\n"
)
TEN_MB = 10 * 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    release: threading.Event  # set at teardown, so stalled handlers end

    def log_message(self, *args) -> None:
        pass

    def _send(
        self, status: int, body: bytes, content_type: str = "text/plain; version=0.0.4"
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        # The client stopping mid-body is what it should do.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._route()

    def _route(self) -> None:
        path = self.path
        if path == "/metrics":
            self._send(200, GOOD_BODY)
        elif path == "/truncated":
            self._send(200, TWO_ENGINES.encode()[:700])
        elif path == "/html":
            self._send(502, HTML_PAGE, "text/html")
        elif path == "/html-200":
            self._send(200, HTML_PAGE, "text/html; charset=utf-8")
        elif path == "/html-as-text":  # a proxy page mislabelled as text/plain
            self._send(200, HTML_PAGE)
        elif path == "/500":
            self._send(500, b"Internal Server Error")
        elif path in ("/big", "/big-no-length"):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            if path == "/big":
                self.send_header("Content-Length", str(TEN_MB))
            self.end_headers()  # HTTP/1.0: without a length the body ends at close
            line = b'vllm:num_requests_running{engine="0"} 1\n' * 1600  # ~64 KiB
            for _ in range(TEN_MB // len(line) + 1):
                self.wfile.write(line)
        elif path == "/half-then-stall":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(GOOD_BODY)
            self.wfile.flush()
            self.release.wait(10)
        elif path == "/drip":  # a byte at a time, never long enough for a read timeout
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            while not self.release.wait(0.05):
                self.wfile.write(b"#")
                self.wfile.flush()
        else:
            self._send(404, b"not found")


@pytest.fixture(scope="module")
def local_server() -> Iterator[str]:
    release = threading.Event()
    handler = type("Handler", (_Handler,), {"release": release})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def stalled_url() -> Iterator[str]:
    """A port that completes the TCP handshake (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/metrics"


def _assert_failed_scrape_is_unknown(fetched) -> None:
    assert not fetched.ok and fetched.text is None and fetched.error
    d = Deriver()
    d.feed(0.0, None)
    s = d.sample()
    assert s["stale"] is True
    assert all(s[k] is None for k in VALUES)


def test_fetch_ok(local_server):
    fetched = fetch_metrics(local_server + "/metrics")
    assert fetched.ok and fetched.status == 200 and fetched.error is None
    assert fetched.text == GOOD_BODY.decode()
    assert 0 <= fetched.elapsed_s < 30  # recorded; a ceiling a busy machine cannot reach
    assert parse(fetched.text).running == 2


def test_fetch_with_a_shared_client(local_server):
    with httpx.Client() as client:
        for _ in range(3):
            assert fetch_metrics(local_server + "/metrics", client=client).ok
        assert fetch_metrics(local_server + "/500", client=client).status == 500
        assert fetch_metrics(local_server + "/metrics", client=client).ok


def test_fetch_truncated_body_gives_a_partial_snapshot(local_server):
    fetched, snap = scrape(local_server + "/truncated")
    assert fetched.ok
    assert snap.errors and "truncated" in snap.errors[0]
    assert snap.running == 5 and snap.ttft is None
    d = Deriver()
    d.feed(0.0, snap)
    d.feed(1.0, snap)
    s = d.sample()
    assert s["stale"] is False and s["running"] == 5
    assert all(s[k] is None for k in WINDOWED)


@pytest.mark.parametrize("path", ["/html", "/html-200", "/html-as-text"])
def test_fetch_html_page(local_server, path):
    fetched = fetch_metrics(local_server + path)
    if path == "/html":
        assert fetched.error == "HTTP 502 Bad Gateway"  # the status says it first
    else:
        assert fetched.error == HTML_ERROR
    assert fetched.status == (502 if path == "/html" else 200)
    _assert_failed_scrape_is_unknown(fetched)


def test_fetch_http_500(local_server):
    fetched, snap = scrape(local_server + "/500")
    assert fetched.status == 500 and fetched.error == "HTTP 500 Internal Server Error"
    assert snap is None
    _assert_failed_scrape_is_unknown(fetched)


@pytest.mark.parametrize("path", ["/big", "/big-no-length"])
def test_fetch_ten_megabytes_stops_at_max_bytes(local_server, path):
    fetched = fetch_metrics(local_server + path, timeout=5)
    assert fetched.error.startswith("too large"), fetched.error
    assert fetched.status == 200
    assert fetched.elapsed_s < 5  # within its timeout: it stopped reading, it did not time out
    _assert_failed_scrape_is_unknown(fetched)


def test_fetch_a_stalled_target_returns_within_the_timeout(stalled_url):
    started = time.monotonic()
    fetched = fetch_metrics(stalled_url, timeout=0.5)
    elapsed = time.monotonic() - started
    assert fetched.error == "timed out after 0.5 s"
    assert fetched.status is None
    # The deadline holds (without one the call never returns); 10 s over it is what a busy
    # machine that preempts this process for seconds cannot exceed.
    assert 0.4 <= elapsed < 0.5 + 10
    _assert_failed_scrape_is_unknown(fetched)


@pytest.mark.parametrize("path", ["/half-then-stall", "/drip"])
def test_fetch_a_body_that_stalls_or_drips_is_cut_at_the_deadline(local_server, path):
    started = time.monotonic()
    fetched = fetch_metrics(local_server + path, timeout=0.5)
    elapsed = time.monotonic() - started
    assert fetched.error == "timed out after 0.5 s"
    assert fetched.status == 200
    assert elapsed < 0.5 + 10  # /drip never ends: any finite time proves the deadline
    _assert_failed_scrape_is_unknown(fetched)


def test_fetch_a_closed_port_fails_without_raising():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        fetched = fetch_metrics(f"http://127.0.0.1:{port}/metrics", timeout=1)
    assert fetched.error.startswith("cannot connect")
    assert fetched.status is None
    _assert_failed_scrape_is_unknown(fetched)


def test_fetch_a_bad_url_fails_without_raising():
    fetched = fetch_metrics("not a url", timeout=1)
    assert not fetched.ok and fetched.error


def test_scrape_imports_no_django():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, vllm_adapter.metrics; "
        "sys.exit(1 if any(m == 'django' or m.startswith('django.') for m in sys.modules) else 0)"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr or "django was imported"

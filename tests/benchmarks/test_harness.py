"""The load generator (apps.benchmarks.harness) against real sparksim processes, plus unit
tests of its arithmetic. Timing accuracy is checked against sparksim's own record of when
it wrote every chunk (/sparksim/trace)."""

import itertools
import json
import math
import statistics

import pytest

from apps.benchmarks.harness.client import Client
from apps.benchmarks.harness.levels import run_level
from apps.benchmarks.harness.metrics import parse_metrics
from apps.benchmarks.harness.prompts import build_messages
from apps.benchmarks.harness.stats import percentiles, stream_metrics, summarize
from apps.benchmarks.harness.stream import StreamParser, tokens_in_chunk
from apps.benchmarks.harness.types import SLO, LevelSpec, PromptLengthError, Scenario
from bench.harness_accuracy import fetch_traces, trace_errors
from tests.conftest import run_async
from tests.sparksim.conftest import NEMOTRON_FLAGS, launch
from vllm_adapter.sse import StreamError

FAST = 10  # the Nemotron simulator's --time-scale for most tests
SEED = {  # SPEC §4, seed 000, single stream: TTFT (s), decode tok/s
    (58, 2): (0.42, 23.0),
    (1834, 32): (1.12, 23.7),  # (*) its total is inconsistent; TTFT and decode are not
    (7234, 32): (3.85, 22.7),
    (1834, 108): (1.12, 23.4),
    (7234, 124): (3.84, 22.9),
}
QWEN = "nvidia/Qwen3.5-35B-A3B-NVFP4"


def _flags(max_seqs: int) -> list[str]:
    flags = list(NEMOTRON_FLAGS)
    flags[flags.index("--max-num-seqs") + 1] = str(max_seqs)
    return flags


@pytest.fixture(scope="module")
def nemotron(tmp_path_factory):
    """Nemotron-3-Super at 10× speed, room for 8 sequences (the concurrency sweep)."""
    sim = launch(tmp_path_factory.mktemp("nemotron"), *_flags(8), time_scale=FAST)
    yield sim
    sim.stop()


def level(sim, spec: LevelSpec, scale: float, slo: SLO | None = None, **kwargs):
    async def go():
        async with await Client.create(sim.url) as client:
            return await run_level(client, spec, slo, time_scale=scale, **kwargs)

    return run_async(go())


def spec(prompt: int, output: int, concurrency: int = 1, requests: int = 2, warmup: int = 1,
         **kwargs) -> LevelSpec:  # fmt: skip
    return LevelSpec(Scenario(f"{prompt}/{output}", prompt, output), concurrency, requests,
                     warmup, **kwargs)  # fmt: skip


# --- 1, 2: exact prompt and output lengths ----------------------------------------------------


@pytest.mark.parametrize("prompt", [58, 1834, 7234])
def test_prompt_lengths_are_exact(nemotron, prompt):
    result = level(nemotron, spec(prompt, 3, concurrency=2, requests=4, warmup=2), FAST)
    assert result.ok == 4 and result.failed == 0, result.errors
    assert result.prompt_mismatches == 0
    assert [r.prompt_tokens for r in result.details] == [prompt] * 4

    async def counted():
        async with await Client.create(nemotron.url) as client:
            messages = await build_messages(client, prompt, "another salt")
            return await client.count_chat_tokens(messages), messages

    count, messages = run_async(counted())
    assert count == prompt and messages[0]["content"].startswith("Request ")


def test_output_token_counts_are_exact_and_come_from_usage(nemotron):
    result = level(nemotron, spec(58, 37, concurrency=2, requests=4, warmup=2), FAST)
    assert result.ok == 4 and result.output_mismatches == 0
    for r in result.details:
        assert r.output_tokens == 37 and sum(r.chunk_tokens) == 37
        assert r.finish_reason == "length" and len(r.itl) == 36
    assert json.loads(json.dumps(result.to_dict()))["requests"][0]["output_tokens"] == 37


def test_a_prompt_shorter_than_the_template_is_refused_clearly(nemotron):
    async def build():
        async with await Client.create(nemotron.url) as client:
            return await build_messages(client, 3, "x")

    with pytest.raises(PromptLengthError, match="shorter than the chat template"):
        run_async(build())
    result = level(nemotron, spec(3, 2), FAST)
    assert result.error and "shorter than the chat template" in result.error and result.sent == 0


# --- 3: the seed scenarios --------------------------------------------------------------------


@pytest.fixture(scope="module")
def realtime(tmp_path_factory):
    sim = launch(tmp_path_factory.mktemp("rt"), *NEMOTRON_FLAGS, time_scale=1)
    yield sim
    sim.stop()


@pytest.mark.parametrize("scenario", list(SEED))
def test_the_seed_scenarios_measure_near_the_seed(nemotron, realtime, scenario):
    """At 10× speed with time_scale=10 (simulated seconds reported; the fixed wall-clock
    costs of sending and tokenizing a prompt count 10× too). 58/2 has a single
    decode gap (4 ms at 10×, where timer jitter matters), so it runs in real time.

    Those fixed costs follow the machine's speed, ×10, and sparksim's own steps are late
    when the VM is slow: in a slow hour of this VM, with nothing else running, the
    1834-token TTFT read 11–15 % over the seed and the 58/2 decode rate (one gap) 24 %
    over. So each figure is held to ±30 % — still far inside what timing the wrong chunk
    or the wrong time scale would cost (2× and more) — and the calibration itself (±5 % of
    the seed on an idle machine) is measured by `make bench`
    (bench/sparksim_calibration.py, docs/BENCHMARKS.md)."""
    prompt, output = scenario
    sim, scale = (realtime, 1) if scenario == (58, 2) else (nemotron, FAST)
    result = level(sim, spec(prompt, output, requests=3), scale)  # medians of 3
    assert result.ok == 3, result.errors
    ttft, decode = SEED[scenario]
    measured_ttft, measured_decode = result.ttft["p50"], result.decode_tok_s["p50"]
    print(f"{scenario}: TTFT {measured_ttft:.3f} s (seed {ttft}), "
          f"decode {measured_decode:.1f} tok/s (seed {decode})")  # fmt: skip
    assert abs(measured_ttft / ttft - 1) <= 0.30
    assert abs(measured_decode / decode - 1) <= 0.30
    assert abs(result.prefill_tok_s["p50"] / (prompt / ttft) - 1) <= 0.30


# --- 4: the concurrency sweep ------------------------------------------------------------------


def test_a_concurrency_sweep_trades_per_stream_speed_for_throughput(nemotron):
    rows = []
    for c in (1, 2, 4, 8):
        result = level(nemotron, spec(1834, 108, concurrency=c, requests=max(2, c), warmup=c),
                       FAST, SLO(ttft_s=30, tpot_s=1))  # fmt: skip
        assert result.ok == max(2, c)
        rows.append((c, result.output_throughput, result.decode_tok_s["p50"], result.ttft["p50"]))
        assert result.goodput == pytest.approx(result.request_throughput)
        assert result.goodput_fraction == 1.0
    print("\n".join(f"c={c}: {o:.1f} tok/s, {d:.1f} tok/s per stream, TTFT {t:.2f} s"
                    for c, o, d, t in rows))  # fmt: skip
    for (_, out0, dec0, ttft0), (_, out1, dec1, ttft1) in itertools.pairwise(rows):
        assert out1 > out0  # the machine does more in total...
        assert dec1 < dec0  # ...each stream gets slower (bandwidth-bound)...
        assert ttft1 >= ttft0 * 0.97  # ...and the first token never comes sooner


# --- 5: measurement accuracy against sparksim's ground truth -----------------------------------


@pytest.fixture(scope="module")
def qwen64(tmp_path_factory):
    sim = launch(tmp_path_factory.mktemp("qwen64"), "--gpu-memory-utilization", "0.85",
                 "--max-model-len", "8192", "--max-num-seqs", "64", model=QWEN, time_scale=10)  # fmt: skip
    yield sim
    sim.stop()


def _ttft_errors(sim, concurrency: int, requests: int) -> tuple[list[float], float]:
    async def go():
        async with await Client.create(sim.url) as client:
            result = await run_level(
                client, spec(128, 8, concurrency, requests, concurrency), time_scale=10
            )
            traces = await fetch_traces(client, [r.response_id for r in result.details])
            return result, traces

    result, traces = run_async(go())
    assert result.ok == requests, result.errors
    errors = trace_errors(result.details, traces)
    assert errors["unmatched"] == [0]  # every chunk the harness saw, sparksim wrote
    # Received after written (same CLOCK_MONOTONIC). sparksim stamps right after its write,
    # so a preemption between the two reads as negative: on a busy machine (one core taken
    # by another process) the scheduler can hold sparksim off the CPU for a time slice or
    # more (-2.1 ms seen; CFS slices run to tens of ms), so 50 ms of allowance. A harness
    # stamping the wrong chunk or the wrong clock is off by far more.
    assert percentiles(errors["ttft"], [1])["p1"] >= -50
    return errors["ttft"], result.diagnostics["loop_lag_p99_ms"]


@pytest.mark.parametrize("concurrency, requests, bound_ms", [(1, 100, 10.0), (64, 128, 20.0)])
def test_ttft_timestamps_match_when_sparksim_wrote_the_first_token(
    qwen64, concurrency, requests, bound_ms
):
    """Receive − write time of each request's first token-bearing chunk, wall ms.

    The machine is shared: another session's test run preempting the harness puts 3–6 ms
    tails even on one stream. So a run over the bound is measured again (three runs), and
    if every single-stream run was over it, each is held to the bound plus the scheduling
    noise the harness measured on itself in that run (its event-loop lag p99, which one
    idle stream cannot raise by itself). The bounds catch real mistakes (timing the wrong
    chunk, or parsing late, costs tens to hundreds of ms); the targets themselves (p99 ≤
    3 ms up to 64 streams) are measured by bench/harness_accuracy.py, not asserted here,
    because a timed unit test on a shared 2-core machine is a coin toss."""
    runs = []
    for _ in range(3):
        errors, loop_lag = _ttft_errors(qwen64, concurrency, requests)
        p99 = percentiles(errors, [99])["p99"]
        runs.append((p99, loop_lag))
        print(f"concurrency {concurrency}: TTFT error p50 {statistics.median(errors):.2f} ms, "
              f"p99 {p99:.2f} ms, max {max(errors):.2f} ms; harness loop lag p99 "
              f"{loop_lag:.2f} ms")  # fmt: skip
        if p99 <= bound_ms:
            return
    noise = concurrency == 1
    assert all(p99 <= bound_ms + (loop_lag if noise else 0) for p99, loop_lag in runs), runs


# --- 6: failures are recorded, never raised --------------------------------------------------------


def test_http_500s_are_recorded_per_request(tmp_path):
    sim = launch(tmp_path, *NEMOTRON_FLAGS, "--fault", "http500:0.5", time_scale=FAST)
    try:
        result = level(sim, spec(58, 4, concurrency=2, requests=10, warmup=2), FAST)
    finally:
        sim.stop()
    assert result.sent == 10 and result.ok + result.failed == 10
    assert 0 < result.failed < 10 and result.errors == {"http_500": result.failed}
    failed = [r for r in result.details if not r.ok]
    assert all(r.status == 500 and "fault injection" in r.error for r in failed)
    assert all(not r["ok"] and r["error"].startswith("http_500") for r in result.requests
               if not r["ok"])  # fmt: skip
    assert result.ttft["n"] == result.ok


def test_a_server_crash_mid_stream_is_recorded_and_the_level_carries_on(tmp_path):
    # The warm-up streams 8 tokens; the first measured request dies after 4 more.
    sim = launch(tmp_path, *NEMOTRON_FLAGS, "--fault", "crash-after-tokens:12", time_scale=FAST)
    try:
        result = level(sim, spec(58, 8, concurrency=1, requests=4, warmup=1), FAST)
    finally:
        sim.stop()
    assert result.sent == 4 and result.ok == 0
    broken, *rest = result.details
    assert broken.error_kind == "stream_broken" and sum(broken.chunk_tokens) == 4
    assert broken.ttft is not None  # what arrived is kept
    # Once the process is gone connecting fails; a request sent while it is dying can
    # still be accepted by the kernel and then reset.
    assert {r.error_kind for r in rest} <= {"connect", "stream_broken"}
    assert sum(result.errors.values()) == 4
    assert result.server["ok"] is False and "/metrics" in result.server["error"]


def test_a_stalled_stream_is_a_per_request_timeout_and_the_level_carries_on(tmp_path):
    # Every stream stops after its 4th token for a minute: the harness's per-request limit
    # ends each one, records it as a timeout with what arrived, and the level finishes.
    sim = launch(tmp_path, *NEMOTRON_FLAGS, "--fault", "stall:60@4", time_scale=1)

    async def go():
        async with await Client.create(sim.url, request_timeout=1.5) as client:
            return await run_level(client, spec(58, 8, requests=2, warmup=1), None, time_scale=1)

    try:
        result = run_async(go())
    finally:
        sim.stop()
    assert result.sent == 2 and result.ok == 0 and result.errors == {"timeout": 2}
    assert all(r.error_kind == "timeout" and r.ttft is not None for r in result.details)
    assert all("within 1.5 s" in r.error for r in result.details)


# --- 7: the server's own view -------------------------------------------------------------------


def test_server_metrics_agree_and_the_client_overhead_is_small(nemotron):
    result = level(nemotron, spec(1834, 16, concurrency=2, requests=4, warmup=2), FAST)
    server = result.server
    assert server["ok"] and server["requests"] == 4  # warm-up outside the window
    assert server["prompt_tokens"] == 4 * 1834 and server["generation_tokens"] == 4 * 16
    # The client's TTFT adds transport and the server's request handling (a few wall ms,
    # × FAST in simulated seconds here).
    # Two processes' clocks of the same requests: a busy machine that preempts either one
    # for tens of ms skews them apart (a window or histogram read wrong is off by far
    # more). The precise overhead (a few wall ms) is measured by bench/harness_accuracy.py.
    assert server["mean_ttft_s"] < result.ttft["mean"] + 0.05 * FAST  # 50 wall ms of skew
    assert server["mean_ttft_s"] == pytest.approx(result.ttft["mean"], rel=0.5)
    assert server["mean_itl_s"] == pytest.approx(result.itl["mean"], rel=0.5)
    assert server["mean_e2e_s"] and server["mean_prefill_s"] and server["mean_decode_s"]
    print(f"client − server mean TTFT: {server['overhead_wall_ms']:.2f} wall ms")
    assert -50 <= server["overhead_wall_ms"] <= 100
    assert server["overhead_ms"] == pytest.approx(server["overhead_wall_ms"] * FAST)
    diagnostics = result.diagnostics
    assert diagnostics["loop_ticks"] > 0 and diagnostics["schedule_lag_p99_ms"] is not None


def test_progress_and_stop(nemotron):
    seen = []

    def on_progress(done, total):
        seen.append((done, total))

    result = level(nemotron, spec(58, 2, requests=10, warmup=1), FAST,
                   on_progress=on_progress, should_stop=lambda: len(seen) >= 4)  # fmt: skip
    assert result.stopped and result.sent == 3
    assert seen == [(1, 11), (2, 11), (3, 11), (4, 11)]


def test_a_warm_prefix_makes_the_first_token_come_sooner(nemotron):
    cold = level(nemotron, spec(7234, 2, requests=2, warmup=1), FAST)
    warm = level(nemotron, spec(7234, 2, requests=2, warmup=1, warm_prefix=True), FAST)
    assert warm.ttft["p50"] < cold.ttft["p50"] * 0.5


# --- 8: arithmetic --------------------------------------------------------------------------


def test_percentiles_interpolate_linearly_like_numpy():
    values = [4, 1, 3, 2]
    assert percentiles(values) == pytest.approx({"p50": 2.5, "p90": 3.7, "p99": 3.97})
    assert percentiles([7.0], [50, 99]) == {"p50": 7.0, "p99": 7.0}
    assert percentiles([], [50]) == {"p50": None}
    assert percentiles([1, None, math.nan, 3], [50]) == {"p50": 2.0}
    assert percentiles(range(101), [0, 95, 100]) == {"p0": 0, "p95": 95, "p100": 100}
    assert summarize([1, 2, 3], scale=2)["mean"] == 4 and summarize([])["n"] == 0
    with pytest.raises(ValueError):
        percentiles([1], [101])


def _sse(**chunk) -> bytes:
    return b"data: " + json.dumps({"id": "chatcmpl-1", **chunk}).encode() + b"\n\n"


def _choice(content, finish=None):
    return [{"index": 0, "delta": content, "finish_reason": finish}]


def test_tpot_and_itl_from_a_synthetic_stream():
    """Role-only chunk first, then chunks of 1, 3 and 2 tokens, a finish chunk, the usage
    chunk and [DONE]; continuous usage gives each chunk's tokens."""
    usage = lambda n: {"prompt_tokens": 100, "completion_tokens": n, "total_tokens": 100 + n}  # noqa: E731
    parser = StreamParser()
    parser.feed(_sse(choices=_choice({"role": "assistant", "content": ""}), usage=usage(0)), 10.0)
    parser.feed(_sse(choices=_choice({"content": "A"}), usage=usage(1)), 10.5)
    both = _sse(choices=_choice({"content": " b c d"}), usage=usage(4))
    parser.feed(both[:20], 10.6)  # an event split across reads counts when it completes
    parser.feed(both[20:], 10.8)
    parser.feed(_sse(choices=_choice({"reasoning": " e f"}), usage=usage(6)), 11.2)
    parser.feed(_sse(choices=_choice({}, "length"), usage=usage(6)), 11.3)
    parser.feed(_sse(choices=[], usage=usage(6)) + b"data: [DONE]\n\n", 11.4)
    assert parser.done and parser.finish_reason == "length" and parser.response_id == "chatcmpl-1"
    assert parser.times == [10.5, 10.8, 11.2] and parser.tokens == [1, 3, 2]
    m = stream_metrics(10.0, parser.times, parser.tokens, 6, 100, time_scale=2)
    assert m["ttft"] == pytest.approx(1.0)  # (10.5 − 10.0) × 2, not the role chunk
    assert m["e2e"] == pytest.approx(2.4)  # to the last token, not the finish or [DONE]
    assert m["tpot"] == pytest.approx((2.4 - 1.0) / 5)
    assert m["decode_tok_s"] == pytest.approx(5 / 1.4)
    assert m["prefill_tok_s"] == pytest.approx(100 / 1.0)
    assert m["itl"] == pytest.approx([0.2, 0.2, 0.2, 0.4, 0.4])  # per token, scaled
    assert statistics.mean(m["itl"]) == pytest.approx(m["tpot"])
    assert stream_metrics(10.0, [10.5], [1], 1, 100)["tpot"] is None


def test_tokens_without_usage_count_one_per_text_chunk_and_crlf_is_accepted():
    assert tokens_in_chunk({"choices": _choice({"content": "x"})}, None) == 1
    assert tokens_in_chunk({"choices": _choice({"reasoning_content": "x"})}, None) == 1
    assert tokens_in_chunk({"choices": [{"text": "x"}]}, None) == 1
    assert tokens_in_chunk({"choices": _choice({"role": "assistant", "content": ""})}, None) == 0
    # the one final usage chunk of include_usage without continuous stats carries nothing
    assert tokens_in_chunk({"choices": [], "usage": {"completion_tokens": 9}}, None) == 0
    parser = StreamParser()
    parser.feed(b": ping\r\n\r\n" + _sse(choices=[{"text": "x"}]).replace(b"\n", b"\r\n"), 1.0)
    assert parser.tokens == [1]


def test_malformed_and_error_events_raise_stream_errors():
    with pytest.raises(StreamError) as bad:
        StreamParser().feed(b"data: {not json}\n\n", 1.0)
    assert bad.value.kind == "malformed_sse"
    with pytest.raises(StreamError) as err:
        StreamParser().feed(b'data: {"error": {"message": "boom", "code": 500}}\n\n', 1.0)
    assert err.value.kind == "stream_error" and "boom" in str(err.value)


def test_metrics_parsing_sums_engines_and_accepts_the_old_itl_name():
    text = "\n".join([
        "# TYPE vllm:time_to_first_token_seconds histogram",
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0',
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0',
        'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5',
        'vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 1.0',
        'vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 1.0',
        'vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 0.5',
        "# TYPE vllm:time_per_output_token_seconds histogram",
        'vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 4.0',
        'vllm:time_per_output_token_seconds_count{model_name="m"} 4.0',
        'vllm:time_per_output_token_seconds_sum{model_name="m"} 0.2',
        "# TYPE vllm:generation_tokens counter",
        'vllm:generation_tokens_total{model_name="m"} 42.0',
        "",
    ])  # fmt: skip
    parsed = parse_metrics(text)
    assert parsed["ttft"] == {"sum": 2.0, "count": 3.0,
                              "metric": "vllm:time_to_first_token_seconds"}  # fmt: skip
    assert parsed["itl"]["metric"] == "vllm:time_per_output_token_seconds"
    assert parsed["generation_tokens"] == 42.0 and "prompt_tokens" not in parsed


def test_level_spec_raises_warmup_to_the_concurrency():
    assert LevelSpec(Scenario("s", 10, 2), concurrency=8, requests=4, warmup=1).warmup == 8
    with pytest.raises(ValueError):
        Scenario("s", 0, 2)

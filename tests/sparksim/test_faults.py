"""sparksim.faults: the `--fault` grammar, its error messages, and the fault helpers.

The messages are asserted word for word: they are the only documentation a user sees
when a fault spec is wrong, so a change to them should be a deliberate one.
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sparksim.faults import (
    FAIL_START_PHASES,
    FAULT_HELP,
    FAULT_NAMES,
    Faults,
    FaultSpecError,
    Http500Gate,
    TokenCrashCounter,
    fail_start_error,
    mangle_metrics,
    parse_faults,
)
from tests.conftest import ROOT

# --- parsing: happy paths ------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("crash-after-tokens:500", {"crash_after_tokens": 500}),
        ("crash-after-tokens:1", {"crash_after_tokens": 1}),
        ("stall:5@20", {"stall_seconds": 5.0, "stall_after_tokens": 20}),
        ("stall:2.5", {"stall_seconds": 2.5, "stall_after_tokens": 8}),
        ("http500:0.25", {"http500_fraction": 0.25}),
        ("http500:1", {"http500_fraction": 1.0}),
        ("metrics:malformed", {"metrics_mode": "malformed"}),
        ("metrics:truncated", {"metrics_mode": "truncated"}),
        ("slow-start:3", {"slow_start_factor": 3.0}),
        ("slow-start:1", {"slow_start_factor": 1.0}),
        ("fail-start:load", {"fail_start_phase": "load"}),
        ("fail-start:profile", {"fail_start_phase": "profile"}),
        ("fail-start:graphs", {"fail_start_phase": "graphs"}),
        ("mem-growth:2", {"mem_growth_gb_per_min": 2.0}),
        ("mem-growth:0.5", {"mem_growth_gb_per_min": 0.5}),
        ("hang:200", {"hang_after_tokens": 200}),
        # Surrounding blanks and capitals, as a shell variable or a YAML file may give them.
        ("  Stall : 5@20 ", {"stall_seconds": 5.0, "stall_after_tokens": 20}),
        ("METRICS:Truncated", {"metrics_mode": "truncated"}),
    ],
)
def test_parse_one_fault(spec: str, expected: dict[str, Any]) -> None:
    faults = parse_faults([spec])
    assert faults == Faults(**expected)


def test_no_faults() -> None:
    assert parse_faults([]) == Faults()
    # argparse's action="append" leaves None when --fault is never given.
    assert parse_faults(None) == Faults()
    assert Faults().describe() == []


def test_all_faults_together_and_describe() -> None:
    faults = parse_faults(
        [
            "crash-after-tokens:500",
            "stall:5@20",
            "http500:0.25",
            "metrics:truncated",
            "slow-start:3",
            "fail-start:graphs",
            "mem-growth:2",
        ]
    )
    assert faults == Faults(
        crash_after_tokens=500,
        stall_seconds=5.0,
        stall_after_tokens=20,
        http500_fraction=0.25,
        metrics_mode="truncated",
        slow_start_factor=3.0,
        fail_start_phase="graphs",
        mem_growth_gb_per_min=2.0,
    )
    assert faults.describe() == [
        "fault injection: crash (abrupt exit, like a CUDA error) once 500 generated tokens "
        "have been streamed in total",
        "fault injection: stall 5 s after token 20 of every stream",
        "fault injection: HTTP 500 on 25 % of completion requests",
        "fault injection: /metrics returns truncated Prometheus text",
        "fault injection: start-up phases take 3× as long",
        "fault injection: start-up fails during graphs (exit code 1)",
        "fault injection: memory footprint grows 2 GB per simulated minute",
    ]


def test_describe_formats_numbers_for_humans() -> None:
    assert parse_faults(["stall:2.5"]).describe() == [
        "fault injection: stall 2.5 s after token 8 of every stream"
    ]
    assert parse_faults(["http500:0.1"]).describe() == [
        "fault injection: HTTP 500 on 10 % of completion requests"
    ]
    # slow-start:1 changes nothing, so it announces nothing.
    assert parse_faults(["slow-start:1"]).describe() == []


# --- parsing: errors -------------------------------------------------------------------

STALL = "expected stall:SECONDS[@TOKENS], e.g. stall:5@20"
CRASH = "expected crash-after-tokens:TOKENS, e.g. crash-after-tokens:500"
HTTP500 = "expected http500:FRACTION, e.g. http500:0.25"
METRICS = "expected metrics:malformed|truncated, e.g. metrics:truncated"
SLOW = "expected slow-start:FACTOR, e.g. slow-start:3"
FAIL = "expected fail-start:load|profile|graphs, e.g. fail-start:graphs"
GROWTH = "expected mem-growth:GB, e.g. mem-growth:2"
NAMES = "crash-after-tokens, stall, http500, metrics, slow-start, fail-start, hang, mem-growth"


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        # not a number (or not a whole one)
        (["stall:abc"], f"--fault stall:abc: {STALL}"),
        (["stall:5@x"], f"--fault stall:5@x: {STALL}"),
        (["stall:5@"], f"--fault stall:5@: {STALL}"),
        (["stall:@20"], f"--fault stall:@20: {STALL}"),
        (["stall:5@2.5"], f"--fault stall:5@2.5: {STALL}"),
        (["crash-after-tokens:1.5"], f"--fault crash-after-tokens:1.5: {CRASH}"),
        (["crash-after-tokens:-3"], f"--fault crash-after-tokens:-3: {CRASH}"),
        (["http500:often"], f"--fault http500:often: {HTTP500}"),
        (["http500:nan"], f"--fault http500:nan: {HTTP500}"),
        (["slow-start:fast"], f"--fault slow-start:fast: {SLOW}"),
        (["mem-growth:inf"], f"--fault mem-growth:inf: {GROWTH}"),
        # unknown name
        (
            ["stal:5"],
            f"--fault stal:5: unknown fault 'stal' (did you mean stall?); expected one of {NAMES}",
        ),
        (["oom:1"], f"--fault oom:1: unknown fault 'oom'; expected one of {NAMES}"),
        ([""], f"--fault : no fault name; expected one of {NAMES}"),
        ([":5"], f"--fault :5: no fault name; expected one of {NAMES}"),
        # missing argument
        (["stall"], f"--fault stall: missing the argument; {STALL}"),
        (["http500:"], f"--fault http500:: missing the argument; {HTTP500}"),
        (["metrics"], f"--fault metrics: missing the argument; {METRICS}"),
        (["fail-start: "], f"--fault fail-start:: missing the argument; {FAIL}"),
        # out of range
        (
            ["crash-after-tokens:0"],
            f"--fault crash-after-tokens:0: TOKENS must be at least 1; {CRASH}",
        ),
        (["stall:0"], f"--fault stall:0: SECONDS must be greater than 0; {STALL}"),
        (["stall:-1@5"], f"--fault stall:-1@5: SECONDS must be greater than 0; {STALL}"),
        (["stall:5@0"], f"--fault stall:5@0: TOKENS must be at least 1; {STALL}"),
        (
            ["http500:0"],
            f"--fault http500:0: FRACTION must be greater than 0 and at most 1; {HTTP500}",
        ),
        (
            ["http500:1.5"],
            f"--fault http500:1.5: FRACTION must be greater than 0 and at most 1; {HTTP500}",
        ),
        (
            ["metrics:garbled"],
            f"--fault metrics:garbled: MODE must be malformed or truncated; {METRICS}",
        ),
        (["slow-start:0.5"], f"--fault slow-start:0.5: FACTOR must be at least 1; {SLOW}"),
        (
            ["fail-start:serve"],
            f"--fault fail-start:serve: PHASE must be one of load, profile, graphs; {FAIL}",
        ),
        (["mem-growth:0"], f"--fault mem-growth:0: GB must be greater than 0; {GROWTH}"),
        (["mem-growth:-1"], f"--fault mem-growth:-1: GB must be greater than 0; {GROWTH}"),
        # the same fault twice, even with the same or another value
        (
            ["stall:5", "stall:3"],
            f"--fault stall:3: stall is already given (as stall:5); give each fault once; {STALL}",
        ),
        (
            ["http500:0.5", "http500:0.5"],
            "--fault http500:0.5: http500 is already given (as "
            f"http500:0.5); give each fault once; {HTTP500}",
        ),
        (
            ["metrics:malformed", "metrics:truncated"],
            "--fault metrics:truncated: metrics is "
            f"already given (as metrics:malformed); give each fault once; {METRICS}",
        ),
    ],
)
def test_parse_errors(specs: list[str], message: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        parse_faults(specs)
    assert str(info.value) == message


def test_fault_spec_error_is_a_value_error() -> None:
    # So argparse `type=` callbacks and generic CLI handling treat it as a usage error.
    assert issubclass(FaultSpecError, ValueError)


def test_fault_help_lists_every_fault_with_a_working_example() -> None:
    assert tuple(NAMES.split(", ")) == FAULT_NAMES
    for name in FAULT_NAMES:
        assert f"{name}:" in FAULT_HELP
    examples = re.findall(r"\(e\.g\. ([^)]+)\)", FAULT_HELP)
    assert [e.split(":")[0] for e in examples] == list(FAULT_NAMES)
    for example in examples:
        assert parse_faults([example]).describe()  # each example turns a fault on
    # argparse %-formats help text: a stray "%" would only blow up when --help is asked for.
    parser = argparse.ArgumentParser(prog="sparksim")
    parser.add_argument("--fault", action="append", metavar="SPEC", help=FAULT_HELP)
    assert "crash-after-tokens:500" in parser.format_help()
    assert parser.parse_args(["--fault", "stall:5@20", "--fault", "http500:0.25"]).fault == [
        "stall:5@20",
        "http500:0.25",
    ]


@pytest.mark.parametrize("phase", FAIL_START_PHASES)
def test_fail_start_error_is_a_vllm_like_line(phase: str) -> None:
    line = fail_start_error(phase)
    assert line.startswith(f"EngineCore failed to start ({phase}): ")
    assert "\n" not in line


def test_fail_start_profile_error_carries_vllms_wording() -> None:
    # SPEC §3: the panel maps exactly this vLLM message to a friendly error.
    assert "Free memory on device" in fail_start_error("profile")
    assert "is less than desired GPU memory utilization" in fail_start_error("profile")
    with pytest.raises(ValueError, match="unknown start-up phase 'serve'"):
        fail_start_error("serve")


# --- mangle_metrics ------------------------------------------------------------------


def vllm_like_metrics() -> str:
    """A real exposition body from prometheus_client, shaped like vLLM's (SPEC §3)."""
    registry = CollectorRegistry()
    labels = {"model_name": "nvidia/Qwen3.5-35B-A3B-NVFP4", "engine": "0"}
    running = Gauge(
        "vllm:num_requests_running", "Running requests.", list(labels), registry=registry
    )
    waiting = Gauge(
        "vllm:num_requests_waiting", "Waiting requests.", list(labels), registry=registry
    )
    kv = Gauge("vllm:kv_cache_usage_perc", "KV cache usage.", list(labels), registry=registry)
    gen = Counter("vllm:generation_tokens", "Generated tokens.", list(labels), registry=registry)
    ttft = Histogram(
        "vllm:time_to_first_token_seconds",
        "TTFT.",
        list(labels),
        buckets=(0.1, 0.5, 1.0, 5.0),
        registry=registry,
    )
    running.labels(**labels).set(2)
    waiting.labels(**labels).set(1)
    kv.labels(**labels).set(0.37)
    gen.labels(**labels).inc(1234)
    ttft.labels(**labels).observe(0.3)
    return generate_latest(registry).decode()


def samples_of(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def test_the_fixture_body_parses() -> None:
    # Guards the tests below: they must fail because of the mangling, not the fixture.
    assert len(samples_of(vllm_like_metrics())) > 10


def test_malformed_metrics_fail_to_parse() -> None:
    original = vllm_like_metrics()
    mangled = mangle_metrics(original, "malformed")
    assert mangled.endswith("\n")
    assert len(mangled.splitlines()) == len(original.splitlines())
    families = text_string_to_metric_families(mangled)  # a generator: fails when consumed
    with pytest.raises(ValueError, match="Invalid metric type: gauge_or_counter"):
        list(families)
    # The bad sample value is a second, independent defect: a parser that skips the bad
    # TYPE line still trips over it.
    without_type = "\n".join(
        line for line in mangled.splitlines() if "gauge_or_counter" not in line
    )
    assert any(line.endswith(" n/a") for line in without_type.splitlines())
    with pytest.raises(ValueError, match="could not convert string to float: 'n/a'"):
        list(text_string_to_metric_families(without_type + "\n"))


@pytest.mark.parametrize("body", ["", "# HELP x nothing here\n", "foo 1\nbar 2\n"])
def test_malformed_breaks_any_body(body: str) -> None:
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(mangle_metrics(body, "malformed")))


def test_truncated_metrics_stop_mid_line_and_fail_to_parse() -> None:
    original = vllm_like_metrics()
    cut = mangle_metrics(original, "truncated")
    assert original.startswith(cut)
    assert not cut.endswith("\n")
    assert 0.45 < len(cut) / len(original) < 0.75
    # It ends inside a sample line, in its name or labels: the rest of that line is gone.
    partial = cut.rsplit("\n", 1)[1]
    full_line = original[len(cut) - len(partial) :].split("\n", 1)[0]
    assert not partial.startswith("#")
    assert len(partial) < full_line.index(" ")  # the value never made it
    # Precisely what a parser does with it: the families before the cut line's family come
    # out intact, then the partial line raises, quoting what it found where the value
    # should be (everything from the "{" on, as the labels never close).
    got: list[tuple[str, dict[str, str], float]] = []
    with pytest.raises(ValueError) as info:
        for family in text_string_to_metric_families(cut):
            got.extend((s.name, s.labels, s.value) for s in family.samples)
    assert "{" in partial
    assert repr(partial[partial.index("{") :]) in str(info.value)
    everything = samples_of(original)
    assert 0 < len(got) < len(everything)
    assert got == everything[: len(got)]
    # Dropping the partial line leaves a body that parses, with fewer samples.
    complete = samples_of(cut[: len(cut) - len(partial)])
    assert got == complete[: len(got)]
    assert len(complete) < len(everything)


def test_truncated_unlabelled_sample_cuts_inside_the_name() -> None:
    body = "".join(f"metric_number_{i} {i}\n" for i in range(10))
    cut = mangle_metrics(body, "truncated")
    assert cut.endswith("metric_")  # half of "metric_number_5", the line spanning the middle
    with pytest.raises(ValueError, match="Invalid value: 'metric_'"):
        list(text_string_to_metric_families(cut))


def test_truncated_name_never_reads_as_a_number() -> None:
    # "infinity_counter" cut in half is "infinity", which float() accepts.
    body = "".join(f"infinity_counter{i} {i}\n" for i in range(3))
    cut = mangle_metrics(body, "truncated")
    assert cut.endswith("infinit")
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(cut))


@pytest.mark.parametrize(
    ("body", "expected"),
    [("# HELP a aaaa\n# HELP b bbbb\n", "# HELP a aaaa"), ("\n\n\n", ""), ("x", "x"), ("", "")],
)
def test_truncated_bodies_without_samples_after_the_middle(body: str, expected: str) -> None:
    assert mangle_metrics(body, "truncated") == expected


def test_unknown_metrics_mode() -> None:
    with pytest.raises(ValueError, match="unknown metrics mode 'garbled'"):
        mangle_metrics("foo 1\n", "garbled")


# --- Http500Gate -----------------------------------------------------------------------


def test_http500_fraction_is_respected() -> None:
    gate = Http500Gate(0.25, seed=7)
    failures = sum(gate.should_fail() for _ in range(4000))
    assert 0.22 <= failures / 4000 <= 0.28


def test_http500_is_deterministic_for_a_seed() -> None:
    def run(seed: int) -> list[bool]:
        gate = Http500Gate(0.25, seed=seed)
        return [gate.should_fail() for _ in range(500)]

    assert run(1) == run(1)
    assert run(1) != run(2)
    # An injected generator gives the same answers as the seed it was made from.
    injected = Http500Gate(0.25, rng=random.Random(1))
    assert [injected.should_fail() for _ in range(500)] == run(1)


def test_http500_extremes_and_bad_fraction() -> None:
    never, always = Http500Gate(0.0), Http500Gate(1.0)
    assert not any(never.should_fail() for _ in range(1000))
    assert all(always.should_fail() for _ in range(1000))
    for bad in (-0.1, 1.1):
        with pytest.raises(ValueError, match="fraction must be between 0 and 1"):
            Http500Gate(bad)


# --- TokenCrashCounter ---------------------------------------------------------------


def test_crash_counter_fires_exactly_at_the_limit() -> None:
    counter = TokenCrashCounter(5)
    assert [counter.add(1) for _ in range(4)] == [False] * 4
    assert counter.remaining == 1
    assert counter.add(1) is True
    assert counter.total == 5
    assert counter.remaining == 0
    # Still true if the caller has not crashed yet: it still should.
    assert counter.add(1) is True


def test_crash_counter_counts_chunks_across_streams() -> None:
    counter = TokenCrashCounter(10)
    assert counter.add(4) is False  # stream A
    assert counter.add(5) is False  # stream B
    assert counter.add(0) is False
    assert counter.add(3) is True  # crosses the limit mid-chunk
    assert counter.total == 12


def test_crash_counter_without_a_limit_never_fires() -> None:
    counter = TokenCrashCounter(None)
    assert not any(counter.add(1000) for _ in range(100))
    assert counter.remaining is None


def test_crash_counter_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="limit must be at least 1"):
        TokenCrashCounter(0)
    with pytest.raises(ValueError, match="must not be negative"):
        TokenCrashCounter(3).add(-1)


# --- independence from Django ----------------------------------------------------------


def test_sparksim_modules_do_not_import_django() -> None:
    # In a fresh interpreter: this test process already has Django loaded by pytest-django.
    code = (
        "import sys, sparksim.faults, sparksim.memory; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'apps', "
        "'sparkpanel')); print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr

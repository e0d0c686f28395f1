"""Fault injection for sparksim: the `--fault NAME[:ARG]` option (repeatable).

The panel's value is in how it behaves when vLLM on a Spark misbehaves — a CUDA crash
mid-stream, a stream that stalls, a /metrics body cut short, a start-up that dies while
capturing CUDA graphs, memory creeping towards the freeze line. Those cannot be provoked
on demand on real hardware, so the simulator provokes them; this module only parses the
specs and holds the small deterministic helpers (no I/O, no clocks), so the engine and
server stay in charge of *when* a fault fires and tests can pin *whether* it does.
"""

from __future__ import annotations

import difflib
import math
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass


class FaultSpecError(ValueError):
    """A `--fault` spec that cannot be used; the message names the spec and the expected form.

    A ValueError subclass so argparse `type=` callbacks and generic CLI error handling
    report it as a usage error rather than a crash.
    """


METRICS_MODES = ("malformed", "truncated")
FAIL_START_PHASES = ("load", "profile", "graphs")
# vLLM exits 1 when the engine core fails to start; the panel only checks "non-zero",
# but matching the real code keeps the simulator honest.
FAIL_START_EXIT_CODE = 1

DEFAULT_STALL_AFTER_TOKENS = 8


@dataclass
class Faults:
    """The active faults of one simulator process; defaults mean "no fault"."""

    crash_after_tokens: int | None = None
    stall_seconds: float | None = None
    stall_after_tokens: int = DEFAULT_STALL_AFTER_TOKENS
    http500_fraction: float = 0.0
    metrics_mode: str | None = None  # "malformed" | "truncated"
    slow_start_factor: float = 1.0
    fail_start_phase: str | None = None
    mem_growth_gb_per_min: float = 0.0
    hang_after_tokens: int | None = None

    def describe(self) -> list[str]:
        """One line per active fault, for the start-up log.

        Printed at start so that whoever reads a run's log (a person, or the panel's
        log view) knows the odd behaviour that follows is injected, not a bug.
        """
        lines: list[str] = []
        if self.crash_after_tokens is not None:
            lines.append(
                f"crash (abrupt exit, like a CUDA error) once {self.crash_after_tokens} "
                "generated tokens have been streamed in total"
            )
        if self.stall_seconds is not None:
            lines.append(
                f"stall {_num(self.stall_seconds)} s after token {self.stall_after_tokens} "
                "of every stream"
            )
        if self.http500_fraction > 0:
            lines.append(
                f"HTTP 500 on {_num(self.http500_fraction * 100)} % of completion requests"
            )
        if self.metrics_mode is not None:
            lines.append(f"/metrics returns {self.metrics_mode} Prometheus text")
        if self.slow_start_factor > 1:
            lines.append(f"start-up phases take {_num(self.slow_start_factor)}× as long")
        if self.fail_start_phase is not None:
            lines.append(
                f"start-up fails during {self.fail_start_phase} (exit code {FAIL_START_EXIT_CODE})"
            )
        if self.hang_after_tokens is not None:
            lines.append(
                f"the engine hangs once {self.hang_after_tokens} tokens have been generated "
                "in total: requests stay running, no token follows, /health stays 200"
            )
        if self.mem_growth_gb_per_min > 0:
            lines.append(
                f"memory footprint grows {_num(self.mem_growth_gb_per_min)} GB per simulated minute"
            )
        return [f"fault injection: {line}" for line in lines]


def _num(value: float) -> str:
    """Format a number for humans: 5 not 5.0, 0.25 not 0.25000000001."""
    return f"{value:.6g}"


# --- parsing -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Kind:
    usage: str  # the NAME:ARG form shown in errors and help
    example: str  # a spec that parses; the tests parse every one
    meaning: str  # one clause for FAULT_HELP
    apply: Callable[[Faults, str, _Fail], None]


class _Fail:
    """Builds the FaultSpecError for one spec, so each parser only states the problem."""

    def __init__(self, spec: str, kind: _Kind | None) -> None:
        self.spec = spec
        self.kind = kind

    def __call__(self, problem: str = "") -> FaultSpecError:
        expected = ""
        if self.kind is not None:
            expected = f"expected {self.kind.usage}, e.g. {self.kind.example}"
        parts = [p for p in (problem, expected) if p]
        return FaultSpecError(f"--fault {self.spec}: " + "; ".join(parts))


def _float(arg: str, fail: _Fail) -> float:
    try:
        value = float(arg)
    except ValueError:
        raise fail() from None
    # float() accepts "nan" and "inf"; neither means anything as a duration or a rate.
    if not math.isfinite(value):
        raise fail()
    return value


def _int(arg: str, fail: _Fail) -> int:
    # Whole numbers only: "1.5" tokens is a typo worth reporting, not rounding.
    if not re.fullmatch(r"\s*\+?\d[\d_]*\s*", arg):
        raise fail()
    return int(arg)


def _crash(faults: Faults, arg: str, fail: _Fail) -> None:
    n = _int(arg, fail)
    if n < 1:
        raise fail("TOKENS must be at least 1")
    faults.crash_after_tokens = n


def _stall(faults: Faults, arg: str, fail: _Fail) -> None:
    seconds_text, at, tokens_text = arg.partition("@")
    seconds = _float(seconds_text, fail)
    tokens = _int(tokens_text, fail) if at else DEFAULT_STALL_AFTER_TOKENS
    if seconds <= 0:
        raise fail("SECONDS must be greater than 0")
    if tokens < 1:
        raise fail("TOKENS must be at least 1")
    faults.stall_seconds = seconds
    faults.stall_after_tokens = tokens


def _http500(faults: Faults, arg: str, fail: _Fail) -> None:
    fraction = _float(arg, fail)
    if not 0 < fraction <= 1:
        raise fail("FRACTION must be greater than 0 and at most 1")
    faults.http500_fraction = fraction


def _metrics(faults: Faults, arg: str, fail: _Fail) -> None:
    mode = arg.lower()
    if mode not in METRICS_MODES:
        raise fail(f"MODE must be {' or '.join(METRICS_MODES)}")
    faults.metrics_mode = mode


def _slow_start(faults: Faults, arg: str, fail: _Fail) -> None:
    factor = _float(arg, fail)
    # Below 1 would make start-up faster than the model says, which hides slowness bugs
    # rather than provoking them.
    if factor < 1:
        raise fail("FACTOR must be at least 1")
    faults.slow_start_factor = factor


def _fail_start(faults: Faults, arg: str, fail: _Fail) -> None:
    phase = arg.lower()
    if phase not in FAIL_START_PHASES:
        raise fail(f"PHASE must be one of {', '.join(FAIL_START_PHASES)}")
    faults.fail_start_phase = phase


def _hang(faults: Faults, arg: str, fail: _Fail) -> None:
    n = _int(arg, fail)
    if n < 1:
        raise fail("TOKENS must be at least 1")
    faults.hang_after_tokens = n


def _mem_growth(faults: Faults, arg: str, fail: _Fail) -> None:
    gb = _float(arg, fail)
    if gb <= 0:
        raise fail("GB must be greater than 0")
    faults.mem_growth_gb_per_min = gb


_KINDS: dict[str, _Kind] = {
    "crash-after-tokens": _Kind(
        "crash-after-tokens:TOKENS",
        "crash-after-tokens:500",
        "the server dies abruptly, like a CUDA crash, once TOKENS generated tokens "
        "have been streamed in total",
        _crash,
    ),
    "stall": _Kind(
        "stall:SECONDS[@TOKENS]",
        "stall:5@20",
        "every stream pauses SECONDS simulated seconds after its TOKENS-th token "
        f"(default {DEFAULT_STALL_AFTER_TOKENS}), once per request",
        _stall,
    ),
    "http500": _Kind(
        "http500:FRACTION",
        "http500:0.25",
        "that fraction (0 < FRACTION ≤ 1) of completion requests answers HTTP 500, "
        "deterministically for a seed",
        _http500,
    ),
    "metrics": _Kind(
        "metrics:malformed|truncated",
        "metrics:truncated",
        "/metrics returns broken Prometheus text",
        _metrics,
    ),
    "slow-start": _Kind(
        "slow-start:FACTOR",
        "slow-start:3",
        "start-up phases take FACTOR (≥ 1) times as long",
        _slow_start,
    ),
    "fail-start": _Kind(
        "fail-start:load|profile|graphs",
        "fail-start:graphs",
        "start-up fails at that phase with a vLLM-like error and a non-zero exit code",
        _fail_start,
    ),
    "hang": _Kind(
        "hang:TOKENS",
        "hang:200",
        "the engine stops generating once TOKENS tokens have been generated in total "
        "(vLLM stuck with requests running): no error, /health stays 200",
        _hang,
    ),
    "mem-growth": _Kind(
        "mem-growth:GB",
        "mem-growth:2",
        "the memory footprint grows GB per simulated minute, to trip a watchdog",
        _mem_growth,
    ),
}

FAULT_NAMES = tuple(_KINDS)


def parse_faults(specs: Iterable[str] | None) -> Faults:
    """Turn the `--fault` values into a Faults, refusing anything ambiguous.

    A fault given twice is an error rather than "last one wins": with two `stall`
    values nobody can tell from the command line which one a test run actually used.
    `None` is accepted because argparse's `action="append"` leaves it when the option
    is absent.
    """
    faults = Faults()
    seen: dict[str, str] = {}
    for raw in specs or ():
        spec = raw.strip()
        name, colon, arg = spec.partition(":")
        name = name.strip().lower()
        arg = arg.strip()
        kind = _KINDS.get(name)
        fail = _Fail(spec, kind)
        if not name:
            raise fail(f"no fault name; expected one of {', '.join(FAULT_NAMES)}")
        if kind is None:
            close = difflib.get_close_matches(name, FAULT_NAMES, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise fail(f"unknown fault {name!r}{hint}; expected one of {', '.join(FAULT_NAMES)}")
        if name in seen:
            raise fail(f"{name} is already given (as {seen[name]}); give each fault once")
        if not colon or not arg:
            raise fail("missing the argument")
        kind.apply(faults, arg, fail)
        seen[name] = spec
    return faults


FAULT_HELP = "Inject a fault; repeat the option for several faults, each at most once. " + " ".join(
    f"{kind.usage}: {kind.meaning} (e.g. {kind.example})." for kind in _KINDS.values()
)


# --- helpers the engine and server call ------------------------------------------------


def mangle_metrics(text: str, mode: str) -> str:
    """Break a Prometheus text body the way real scrapes break.

    "malformed": a `# TYPE` line with an unknown type and a sample whose value is not a
    number — what a buggy exporter or a proxy rewriting the body produces.
    "truncated": the body cut off mid-line at about half, without a trailing newline —
    what a connection reset mid-response produces. The cut lands inside a sample's name
    or labels, never inside its value: a value cut short ("12" of "1234") would still
    parse, and a scraper cannot be expected to notice a silently wrong number.
    Either way `prometheus_client`'s parser raises on the damaged line, so the panel's
    scraper must cope with a parse error, not just with a missing series.
    """
    if mode == "malformed":
        return _malformed(text)
    if mode == "truncated":
        return _truncated(text)
    raise ValueError(f"unknown metrics mode {mode!r}; expected one of {METRICS_MODES}")


_TYPE_LINE = re.compile(r"^# TYPE (\S+) \S+$")


def _is_sample(line: str) -> bool:
    return bool(line.strip()) and not line.startswith("#")


def _malformed(text: str) -> str:
    lines = text.splitlines()
    typed = next((i for i, line in enumerate(lines) if _TYPE_LINE.match(line)), None)
    if typed is None:
        lines.insert(0, "# TYPE vllm:num_requests_running gauge_or_counter")
    else:
        name = _TYPE_LINE.match(lines[typed]).group(1)  # type: ignore[union-attr]
        lines[typed] = f"# TYPE {name} gauge_or_counter"
    # Damage a sample in the middle too, so a parser that skips the bad TYPE line
    # still meets a broken value further on.
    samples = [i for i, line in enumerate(lines) if _is_sample(line)]
    if samples:
        i = samples[len(samples) // 2]
        head = lines[i].rsplit(" ", 1)[0] if " " in lines[i] else lines[i]
        lines[i] = f"{head} n/a"
    else:
        lines.append('vllm:num_requests_running{model_name="?",engine="0"} n/a')
    return "\n".join(lines) + "\n"


def _truncated(text: str) -> str:
    if not text:
        return ""
    middle = len(text) // 2
    start = 0
    for line in text.splitlines(keepends=True):
        end = start + len(line)
        if end > middle and _is_sample(line):
            brace = line.find("{")
            if brace > 0:
                labels_end = line.find("}", brace)
                labels_end = labels_end if labels_end > brace else len(line.rstrip("\n"))
                cut = brace + max(1, (labels_end - brace) // 2)
            else:
                name = line.split(" ", 1)[0]
                cut = max(1, len(name) // 2)
                # A name cut to "nan" or "inf" would parse as a value: shorten it instead.
                while cut > 1 and _is_float(line[:cut]):
                    cut -= 1
            return text[: start + cut]
        start = end
    # No sample after the middle (a body of comments or blank lines): cut at the middle
    # anyway, never right after a newline.
    return text[:middle].rstrip("\n")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class Http500Gate:
    """Decides which completion requests answer HTTP 500.

    Seeded so a failing test run can be replayed exactly: the same seed gives the same
    sequence of failures for the same sequence of requests.
    """

    def __init__(self, fraction: float, seed: int = 0, *, rng: random.Random | None = None) -> None:
        if not 0 <= fraction <= 1:
            raise ValueError(f"fraction must be between 0 and 1, not {fraction}")
        self.fraction = fraction
        # Not for security: a reproducible stream of coin flips is the point.
        self._rng = rng if rng is not None else random.Random(seed)  # noqa: S311

    def should_fail(self) -> bool:
        # Always draw, even at fraction 0, so the sequence for a seed never depends on
        # whether the fault is on.
        return self._rng.random() < self.fraction


class TokenCrashCounter:
    """Counts generated tokens across all streams for crash-after-tokens.

    Counted server-wide, not per request, because a real CUDA crash takes down every
    stream at once, at a moment the client cannot predict from its own request.
    """

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self.limit = limit
        self.total = 0

    @property
    def remaining(self) -> int | None:
        """Tokens still to stream before the crash (None: never), so a caller sending
        several tokens per chunk can stop at exactly the limit."""
        if self.limit is None:
            return None
        return max(0, self.limit - self.total)

    def add(self, n: int) -> bool:
        """Record `n` streamed tokens; True once the total has reached the limit.

        Stays True afterwards: if the caller has not crashed yet, it still should.
        """
        if n < 0:
            raise ValueError(f"token count must not be negative, not {n}")
        self.total += n
        return self.limit is not None and self.total >= self.limit


def fail_start_error(phase: str) -> str:
    """The vLLM-like error line to log when `fail-start:PHASE` fires.

    Modelled on what vLLM, safetensors and PyTorch print when that phase fails (the
    profile one is vLLM's own wording), so the panel's mapping of start-up failures to
    friendly errors (SPEC §3) is exercised with realistic text, not a made-up marker.
    """
    messages = {
        "load": "safetensors_rust.SafetensorError: Error while deserializing header: "
        "MetadataIncompleteBuffer",
        "profile": "ValueError: Free memory on device (104.21/121.69 GiB) on startup is "
        "less than desired GPU memory utilization (0.9, 109.52 GiB). Decrease GPU memory "
        "utilization or reduce GPU memory used by other processes.",
        "graphs": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "(while capturing CUDA graphs)",
    }
    if phase not in messages:
        raise ValueError(f"unknown start-up phase {phase!r}; expected one of {FAIL_START_PHASES}")
    return f"EngineCore failed to start ({phase}): {messages[phase]}"

"""Turn a starting vLLM server's log into progress, facts and friendly failure reasons.

Pure Python, no Django: the Celery task that follows a container's log, the sparksim tests
and the run page all feed lines into `LogFollower` (or call `parse_line`) with plain
strings. The lines recognised are SPEC §3's start-up sequence; the failures are SPEC §6's
pain points (utilization above what is free, KV cache too small, images without sm_121
kernels, out-of-memory).

vLLM changes its wording between versions and decorates every line, so the parser is
deliberately lenient:

* every pattern is searched for, never anchored to the start of the message, after the
  log prefix (`(APIServer pid=1) INFO 11-29 08:50:01 [loader.py:123] `, the older
  `loader.py:123] `, uvicorn's `INFO:     `, Docker's `--timestamps`) is split off;
* ANSI colour codes are removed and a tqdm line holding several updates separated by
  `\\r` is read as several lines — `parse_line` returns one event per update, in order, so
  a caller that only wants the latest takes the last one;
* numbers may carry thousands separators (`8,436,583`) and sizes may say GB or GiB;
* nothing here raises on odd input: an unrecognised line yields no events.

Errors are only recognised on lines logged at ERROR/CRITICAL or printed without a log
level (tracebacks and argparse's `vllm serve: error: ...` on stderr): vLLM logs prompts and
advice at INFO/WARNING, and a prompt that quotes "CUDA out of memory" must not fail a
healthy run. A "warning" event names a likely cause that is not fatal by itself (PyTorch's
"GB10 with CUDA capability sm_121 is not compatible" UserWarning: sm_120 kernels often run
on the Spark): the caller fails the start when vLLM exits, and then gives that advice.

The wording is checked against vLLM itself: the contract files hold the format strings
found in each supported version's source (``vllm_adapter/needles.py`` says which), and
``tests/vllm_adapter`` renders every one of them through this parser and replays logs
captured from a real vLLM (``tests/vllm_adapter/data``).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum

from vllm_adapter import advice as _advice

__all__ = ["LogEvent", "LogFollower", "Phase", "parse_line"]

Fact = float | int | str


class Phase(StrEnum):
    """Start-up phases, in the order vLLM goes through them."""

    STARTING = "starting"  # arguments, architecture, max model len
    LOADING = "loading"  # weights from disk into the pool
    COMPILING = "compiling"  # torch.compile, memory profiling, KV cache, CUDA graph capture
    SERVING = "serving"  # the HTTP server is coming up / is up

    @property
    def rank(self) -> int:
        return _PHASE_ORDER.index(self)


_PHASE_ORDER: list[Phase] = list(Phase)


@dataclass
class LogEvent:
    """One thing a log line told us.

    kind is "phase" (a step started), "progress" (a k/n counter moved), "fact" (a number
    worth showing, in `facts`), "error" (with `error` and `advice`), "warning" (a likely
    cause that is not fatal by itself, with `error` and `advice`) or "ready".
    """

    kind: str
    phase: Phase | None = None
    percent: float | None = None
    step: str = ""
    facts: dict[str, Fact] = field(default_factory=dict)
    error: str = ""
    advice: str = ""
    # A short machine-readable name of the failure ("free_memory", "kv_too_small", ...),
    # so the panel can link to the planner or rank errors without matching advice text.
    cause: str = ""


# --- helpers ------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")

_PREFIX = re.compile(
    r"""^\s*
    (?:\d{4}-\d{2}-\d{2}[T\ ][\d:.,]+Z?\s+)?        # docker logs --timestamps
    # (APIServer pid=123) (EngineCore_0 pid=45), or a Ray worker's (RayWorkerProc pid=67, ip=…)
    (?:\([^()]{0,80}\bpid=\d+(?:,\ ip=[\w.:\-]{1,64})?\)\s*)*
    (?:
        (?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL):?\s+
        (?:\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s+)?   # 11-29 08:50:01
        (?:\[?[\w.\-/]{1,200}:\d+\]\s*)?                      # [loader.py:123] or loader.py:123]
    )?
    """,
    re.X,
)

# Levels on which an error pattern counts; None is a line printed without a log prefix.
_ERROR_LEVELS = {None, "ERROR", "CRITICAL", "FATAL"}

# Long lines (a huge non-default args dict, a pasted prompt) are only searched in their
# first part: every start-up line of interest is short, and it bounds regex time.
_MAX_SEARCH = 8192

_NUM = r"(\d{1,15}(?:\.\d{1,12})?)"
_INT = r"(\d{1,3}(?:,\d{3}){1,6}|\d{1,18})"
_SIZE = _NUM + r"\s*(?:GiB|GB|G)\b"


def _number(text: str) -> int | float | None:
    """`8,436,583` → 8436583, `64.37` → 64.37; None where it is not a number after all."""
    cleaned = text.replace(",", "").replace("_", "")
    try:
        return float(cleaned) if "." in cleaned else int(cleaned)
    except ValueError:
        return None


def _segments(line: str) -> Iterator[str]:
    """The pieces of a raw line a terminal would show one after another.

    tqdm rewrites its bar with `\\r`, so one "line" from Docker may hold many updates;
    callers may also hand over a chunk with newlines in it.
    """
    for piece in re.split(r"[\r\n]+", _ANSI.sub("", line)):
        piece = piece.strip()
        if piece:
            yield piece


def _split_prefix(segment: str) -> tuple[str | None, str]:
    """(log level or None, the message without vLLM's/uvicorn's/Docker's prefix)."""
    match = _PREFIX.match(segment)
    if match is None:  # pragma: no cover - every part of _PREFIX is optional
        return None, segment
    level = match.group("level")
    return (level.upper() if level else None), segment[match.end() :]


# --- progress and facts -------------------------------------------------------------------


@dataclass
class _Hit:
    phase: Phase
    step: str = ""
    percent: float | None = None
    facts: dict[str, Fact] = field(default_factory=dict)
    progress: bool = False


_Handler = Callable[[re.Match[str]], _Hit]
_RULES: list[tuple[re.Pattern[str], _Handler]] = []


def _rule(pattern: str) -> Callable[[_Handler], _Handler]:
    def register(handler: _Handler) -> _Handler:
        _RULES.append((re.compile(pattern, re.IGNORECASE), handler))
        return handler

    return register


def _facts(**values: int | float | str | None) -> dict[str, Fact]:
    return {key: value for key, value in values.items() if value is not None}


def _counter(match: re.Match[str]) -> tuple[int, int, float] | None:
    """k, n and percent of a tqdm counter; k/n wins over the printed (rounded) percent."""
    k, n = _number(match.group("k")), _number(match.group("n"))
    if not isinstance(k, int) or not isinstance(n, int):
        return None
    if n > 0:
        return k, n, max(0.0, min(100.0, 100.0 * k / n))
    pct = _number(match.group("pct") or "")
    return (k, n, max(0.0, min(100.0, float(pct)))) if pct is not None else None


# 1. STARTING


_VERSION = r"v?(\d{1,4}(?:\.[\w+\-]{1,40}){0,6})"


def _version_hit(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.STARTING, f"vLLM {m.group(1)}", facts={"vllm_version": m.group(1)})


# "vLLM server version 0.32.0, serving model M" (0.1x-0.3x without the logo), the older
# "vLLM API server version 0.11.1", and the logo's "█▄▀ █  version 0.32.0" line.
_rule(r"vLLM (?:API )?server version\s+" + _VERSION)(_version_hit)
_rule(r"[█▀▄]\s+version\s+" + _VERSION)(_version_hit)


@_rule(r"non-default args:")
def _args(m: re.Match[str]) -> _Hit:
    # The dict is Python repr, not JSON; only max_model_len is worth fishing out of it.
    found = re.search(r"['\"]max_model_len['\"]\s*:\s*" + _INT, m.string)
    return _Hit(
        Phase.STARTING,
        "Reading arguments",
        facts=_facts(max_model_len=_number(found.group(1)) if found else None),
    )


@_rule(r"Initializing an? (?:V\d+ )?LLM engine(?:\s*\(" + _VERSION + r"\))?")
def _init(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.STARTING, "Initializing engine", facts=_facts(vllm_version=m.group(1)))


@_rule(r"Resolved architecture:\s*([\w.]+)")
def _architecture(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.STARTING, f"Architecture {m.group(1)}", facts={"architecture": m.group(1)})


@_rule(r"Using max model len\s*" + _INT)
def _max_model_len(m: re.Match[str]) -> _Hit:
    value = _number(m.group(1))
    return _Hit(Phase.STARTING, f"Max model length {m.group(1)}", facts=_facts(max_model_len=value))


@_rule(r"Chunked prefill is enabled with max_num_batched_tokens=" + _INT)
def _chunked_prefill(m: re.Match[str]) -> _Hit:
    """vLLM's SchedulerConfig says it (config/scheduler.py, 0.32/0.33): one engine step
    prefills at most this many prompt tokens, so no step of a long prompt takes longer
    than this many tokens' worth (apps/guard/hang.py's allowance)."""
    value = _number(m.group(1))
    return _Hit(Phase.STARTING, f"Chunked prefill, {m.group(1)} tokens a step",
                facts=_facts(max_num_batched_tokens=value))  # fmt: skip


# 2-4. LOADING

_DRAFTER_STEP = "Loading drafter model"


@_rule(r"Starting to load model\b\s*(\S*)")
def _start_load(m: re.Match[str]) -> _Hit:
    name = m.group(1).rstrip(".…")
    return _Hit(Phase.LOADING, f"Loading model {name}".strip(), percent=0.0)


@_rule(r"Loading drafter model\b")
def _drafter(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.LOADING, _DRAFTER_STEP)


@_rule(r"Using model weights format")
def _weights_format(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.LOADING, "Loading model")


# "Loading safetensors checkpoint shards", "Loading pt checkpoint shards", and the
# fastsafetensors loader's own bar; with or without tqdm's bar and [elapsed<left] part.
@_rule(
    r"Loading [^:\n]{0,80}?(?:checkpoint shards|shards|loader)\s*:\s*"
    r"(?:(?P<pct>\d{1,3})%)?[^\d\n]{0,200}?(?P<k>\d{1,9})/(?P<n>\d{1,9})"
)
def _shards(m: re.Match[str]) -> _Hit:
    counter = _counter(m)
    if counter is None:
        return _Hit(Phase.LOADING, "Loading weights")
    k, n, percent = counter
    return _Hit(Phase.LOADING, f"Loading weights {k}/{n}", percent=percent, progress=True)


@_rule(r"Loading weights took\s*" + _NUM + r"\s*s")
def _weights_took(m: re.Match[str]) -> _Hit:
    return _Hit(
        Phase.LOADING,
        "Weights loaded",
        percent=100.0,
        facts=_facts(weights_load_s=_number(m.group(1))),
    )


# vLLM divides by 2**30 even where older versions print "GB", so both are GiB.
@_rule(r"Model loading took\s*" + _SIZE + r"(?:\s*memory)?(?:\s*and\s*" + _NUM + r"\s*s)?")
def _model_took(m: re.Match[str]) -> _Hit:
    return _Hit(
        Phase.LOADING,
        "Model loaded",
        percent=100.0,
        facts=_facts(
            model_memory_gib=_number(m.group(1)),
            model_load_s=_number(m.group(2)) if m.group(2) else None,
        ),
    )


@_rule(r"Loading model weights took\s*" + _SIZE)
def _old_model_took(m: re.Match[str]) -> _Hit:
    return _Hit(
        Phase.LOADING,
        "Model loaded",
        percent=100.0,
        facts=_facts(model_memory_gib=_number(m.group(1))),
    )


# 5-9. COMPILING: torch.compile, memory profiling, KV cache, CUDA graphs, engine init

_COMPILE_STEP = "Compiling (torch.compile)"


@_rule(r"Dynamo bytecode transform time:\s*" + _NUM + r"\s*s")
def _dynamo(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.COMPILING, _COMPILE_STEP)


@_rule(r"Compiling a graph for\b")
def _graph(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.COMPILING, _COMPILE_STEP)


@_rule(r"Starting torch\.compile|Warming up model for the compilation")
def _compile_start(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.COMPILING, _COMPILE_STEP)


# Today's "torch.compile took 20.01 s in total" (one per compiled part, e.g. "[backbone] "
# and "[draft_model] "); older versions said "takes". init engine's line has the total.
@_rule(r"torch\.compile (?:takes|took)\s*" + _NUM + r"\s*s")
def _compile_total(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.COMPILING, _COMPILE_STEP, facts=_facts(compile_s=_number(m.group(1))))


@_rule(r"Directly load the compiled graph|for vLLM's torch\.compile")
def _compile_cache(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.COMPILING, _COMPILE_STEP)


@_rule(r"Memory profiling takes\s*" + _NUM + r"\s*s|Initial profiling/warmup run took")
def _profiling(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.COMPILING, "Profiling memory")


@_rule(r"Available KV cache memory:\s*" + _SIZE)
def _kv_memory(m: re.Match[str]) -> _Hit:
    return _Hit(
        Phase.COMPILING,
        f"KV cache {m.group(1)} GiB",
        facts=_facts(kv_cache_gib=_number(m.group(1))),
    )


# The CPU backend sizes its pool from VLLM_CPU_KVCACHE_SPACE, not from a profile
# (v1/worker/cpu_worker.py: "Explicitly set (1.0/20.71) GiB for KV cache on node 0.").
@_rule(r"Explicitly set \(\s*" + _NUM + r"\s*/\s*" + _NUM + r"\s*\)\s*GiB for KV cache")
def _cpu_kv_memory(m: re.Match[str]) -> _Hit:
    return _Hit(
        Phase.COMPILING,
        f"KV cache {m.group(1)} GiB",
        facts=_facts(kv_cache_gib=_number(m.group(1)), kv_cache_device="cpu"),
    )


# "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx", one
# line; %s is the pool: "GPU", "CPU", "XPU", "GPU + host".
@_rule(r"KV cache size:\s*" + _INT + r"\s*tokens")
def _kv_tokens(m: re.Match[str]) -> _Hit:
    return _Hit(
        Phase.COMPILING,
        f"KV cache {m.group(1)} tokens",
        facts=_facts(kv_cache_tokens=_number(m.group(1))),
    )


# Older versions count blocks, not tokens; tokens = blocks × block size (16 unless set),
# which the caller knows better than the log, so the parser does not guess.
@_rule(r"#\s*(?:GPU|cuda|npu|xpu|hpu)\s+blocks:\s*" + _INT)
def _kv_blocks(m: re.Match[str]) -> _Hit:
    return _Hit(
        Phase.COMPILING,
        f"KV cache {m.group(1)} blocks",
        facts=_facts(kv_cache_blocks=_number(m.group(1))),
    )


@_rule(r"Maximum concurrency for\s*" + _INT + r"\s*tokens per request:\s*" + _NUM + r"\s*x")
def _concurrency(m: re.Match[str]) -> _Hit:
    value = _number(m.group(2))
    return _Hit(
        Phase.COMPILING,
        f"Max concurrency {m.group(2)}×",
        facts=_facts(
            max_concurrency=float(value) if value is not None else None,
            max_concurrency_len=_number(m.group(1)),
        ),
    )


# "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  50%| 34/67", the older
# "Capturing CUDA graph shapes: 100%|██████████| 35/35 [...]".
@_rule(
    r"Capturing\s+CUDA\s*graphs?\b[^:\n]{0,120}:\s*"
    r"(?:(?P<pct>\d{1,3})%)?[^\d\n]{0,200}?(?P<k>\d{1,9})/(?P<n>\d{1,9})"
)
def _capture_progress(m: re.Match[str]) -> _Hit:
    counter = _counter(m)
    if counter is None:
        return _Hit(Phase.COMPILING, "Capturing CUDA graphs")
    _, _, percent = counter
    return _Hit(
        Phase.COMPILING, f"Capturing CUDA graphs {percent:.0f} %", percent=percent, progress=True
    )


# Older versions announce capture with a sentence and no counter.
@_rule(r"Capturing\s+(?:the\s+model\s+for\s+)?cuda\s*graphs?\b(?![^:\n]{0,120}:\s*\d)")
def _capture_start(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.COMPILING, "Capturing CUDA graphs")


@_rule(r"Graph capturing finished in\s*" + _NUM + r"\s*secs?(?:,\s*took\s*" + _SIZE + r")?")
def _capture_done(m: re.Match[str]) -> _Hit:
    return _Hit(
        Phase.COMPILING,
        "CUDA graphs captured",
        percent=100.0,
        facts=_facts(
            graph_capture_s=_number(m.group(1)),
            graph_memory_gib=_number(m.group(2)) if m.group(2) else None,
        ),
    )


# "... took 65.00 s (compilation: 40.00 s)" where torch.compile ran (the total of all its
# parts, so it replaces compile_s), "... took 36.14 s" where it did not (the CPU build).
@_rule(
    r"init engine \([^)]{0,120}\) took\s*"
    + _NUM
    + r"\s*s(?:\s*\(compilation:\s*"
    + _NUM
    + r"\s*s)?"
)
def _init_engine(m: re.Match[str]) -> _Hit:
    return _Hit(
        Phase.COMPILING,
        "Engine initialised",
        percent=100.0,
        facts=_facts(
            init_engine_s=_number(m.group(1)),
            compile_s=_number(m.group(2)) if m.group(2) else None,
        ),
    )


# 10. SERVING (11, "Application startup complete", is the separate "ready" event)


@_rule(r"Starting vLLM (?:API )?server\b(?:\s+\d+)?(?:\s+on\s+(\S+))?")
def _server(m: re.Match[str]) -> _Hit:
    where = f" on {m.group(1)}" if m.group(1) else ""
    return _Hit(Phase.SERVING, f"Starting API server{where}", percent=0.0)


@_rule(r"Waiting for application startup|Started server process|Uvicorn running on")
def _uvicorn(m: re.Match[str]) -> _Hit:
    return _Hit(Phase.SERVING, "Starting API server")


_READY = re.compile(r"Application startup complete", re.IGNORECASE)


# --- errors -------------------------------------------------------------------------------

_UTIL = "--gpu-memory-utilization"


@dataclass(frozen=True)
class _ErrorRule:
    cause: str
    pattern: re.Pattern[str]
    advise: Callable[[re.Match[str]], tuple[str, dict[str, Fact]]]
    rank: int = 2  # 2 names the cause; 1 is an unexplained exception; 0 "it failed"


def _free_memory(m: re.Match[str]) -> tuple[str, dict[str, Fact]]:
    advice = (
        "The Spark does not have that much memory free: lower --gpu-memory-utilization "
        "(at most 0.90 on a Spark; the planner shows the largest safe value) or stop other "
        "processes using memory."
    )
    numbers = re.search(
        r"\(\s*"
        + _NUM
        + r"\s*/\s*"
        + _NUM
        + r"\s*GiB\s*\).{0,200}?(?:utilization|weights)\s*\(\s*"
        + _NUM
        + r"\s*,\s*"
        + _NUM,
        m.string,
    )
    if numbers is None:
        return advice, {}
    free, total, util, wanted = (_number(g) for g in numbers.groups())
    return advice, _facts(
        free_memory_gib=free,
        total_memory_gib=total,
        requested_utilization=util,
        requested_memory_gib=wanted,
    )


def _kv_too_small(m: re.Match[str]) -> tuple[str, dict[str, Fact]]:
    # Newer vLLM states its estimate; older ones give the KV cache's token capacity,
    # which is the same bound.
    estimate = re.search(r"estimated maximum model length is\s*" + _INT, m.string) or re.search(
        r"stored in KV cache\s*\(\s*" + _INT, m.string
    )
    seq_len = re.search(r"max seq len\s*\(\s*" + _INT, m.string)
    z = _number(estimate.group(1)) if estimate else None
    limit = f"to at most {z} (vLLM's estimate)" if z is not None else "(vLLM gave no estimate)"
    advice = (
        "The KV cache cannot hold one request at the full context length: lower "
        f"--max-model-len {limit}, use --kv-cache-dtype fp8, or raise {_UTIL} "
        "(at most 0.90 on a Spark)."
    )
    return advice, _facts(
        estimated_max_model_len=z,
        max_model_len=_number(seq_len.group(1)) if seq_len else None,
    )


def _recurrent(m: re.Match[str]) -> tuple[str, dict[str, Fact]]:
    seqs = re.search(r"max_num_seqs\s*=\s*" + _INT, m.string)
    advice = (
        "The recurrent (Mamba) state kept for every one of max_num_seqs sequences leaves too "
        "little KV cache for one full-length request: lower --max-num-seqs (4–10 is usual on "
        f"a Spark), lower --max-model-len, or raise {_UTIL} (at most 0.90 on a Spark)."
    )
    return advice, _facts(max_num_seqs=_number(seqs.group(1)) if seqs else None)


def _fixed(text: str) -> Callable[[re.Match[str]], tuple[str, dict[str, Fact]]]:
    return lambda _m: (text, {})


_ARCH_ADVICE = (
    "The image lacks kernels for the Spark's Blackwell GB10 GPU (sm_121): use an image "
    "built for it (e.g. vllm/vllm-openai:cu130-nightly) and pin that tag in the recipe."
)

# --- argparse: `vllm serve` refuses its command line (exit status 2, before any log prefix)

# "vllm: error: unrecognized arguments: --swap-space 0" (the top-level parser reports
# leftovers), "vllm serve: error: argument --dtype: invalid choice: 'x' (choose from ...)",
# "... argument --max-num-seqs: invalid int value: 'four'", "... the following arguments
# are required: ...", "... ambiguous option: --max could match ...".
_ARGPARSE = re.compile(
    r"^(?P<prog>[\w.\-]{1,80}(?: [\w\-]{1,40}){0,2}): error: (?P<msg>(?:unrecognized arguments"
    r"|argument |the following arguments are required|ambiguous option|one of the arguments"
    r"|expected |unexpected option|not allowed with).{0,2000})"
)
_ARGUMENT = re.compile(r"^argument (?P<flag>[^:\s]{1,120}(?:/[^:\s]{1,120})*): (?P<what>.{1,2000})")
_FLAG = re.compile(r"(?<![\w-])--?[A-Za-z][\w\-]{0,80}")
_INVALID_CHOICE = re.compile(
    r"invalid choice: '?(?P<value>[^'(]{0,200}?)'?\s*\(choose from (?P<choices>.*)\)"
)
_INVALID_TYPE = re.compile(r"invalid (?P<type>\w{1,60}) value: '?(?P<value>[^']{0,200})'?")


def _flag_advice(flag: str) -> str:
    return (
        _advice.REMOVED.get(flag) or f"vLLM has no option {flag}; check its spelling or delete it"
    )


def _argparse_event(segment: str, match: re.Match[str]) -> LogEvent:
    msg = match.group("msg").strip()
    facts: dict[str, Fact] = {}
    before = "vLLM refused its command line before loading anything"
    if msg.startswith("unrecognized arguments"):
        flags = [f for f in _FLAG.findall(msg.partition(":")[2]) if f.startswith("--")]
        facts["bad_flag"] = flags[0] if flags else msg.partition(":")[2].strip()[:120]
        said = "; ".join(_flag_advice(f) for f in dict.fromkeys(flags)) or msg
        text = f"{before}: it does not know {', '.join(flags) or 'an argument'}. {said}."
    elif argument := _ARGUMENT.match(msg):
        names = argument.group("flag").split("/")  # "-tp/--tensor-parallel-size"
        flag = next((name for name in names if name.startswith("--")), names[0])
        what = argument.group("what")
        facts["bad_flag"] = flag
        if choice := _INVALID_CHOICE.search(what):
            value = choice.group("value").strip()
            facts["bad_value"] = value
            choices = choice.group("choices")
            known = _advice.VALUES.get((flag, value))
            if len(choices) > 300:
                choices = choices[:297] + "..."
            text = f"{before}: {flag} does not take {value!r}" + (
                f"; {known}." if known else f"; it takes one of {choices}."
            )
        elif invalid := _INVALID_TYPE.search(what):
            value = invalid.group("value")
            facts["bad_value"] = value
            kind = invalid.group("type")
            text = f"{before}: {flag} wants a value of type {kind}, and {value!r} is not one."
        else:
            text = f"{before}: {flag}: {what}."
    else:
        flags = _FLAG.findall(msg)
        if flags:
            facts["bad_flag"] = flags[0]
        text = f"{before}: {msg}."
    text += " Fix the recipe and start it again."
    return LogEvent("error", error=segment, advice=text, facts=facts, cause="bad_argument")


# --- warnings: a likely cause, not fatal by itself

_WARNING_RULES: list[_ErrorRule] = [
    # torch's UserWarning, both wordings: "NVIDIA GB10 with CUDA capability sm_121 is not
    # compatible with the current PyTorch installation." and "Found GPU0 NVIDIA GB10 which
    # is of compute capability (CC) 12.1." (the older "... of cuda capability 12.1."), whose
    # following lines are "Minimum and Maximum cuda capability supported by this version
    # of PyTorch is (8.0) - (12.0)" or "Your installed torch==... does not include kernels
    # for this GPU". sm_120 kernels often run on sm_121, so vLLM may start regardless.
    _ErrorRule(
        "arch",
        re.compile(
            r"(?:sm_121|capability 12\.1)\b.{0,200}?(?:not compatible|unsupported|not supported"
            r"|supported by this version)"
            r"|which is of (?:cuda|compute) capability(?: \(CC\))? 12\.1\b",
            re.I,
        ),
        _fixed(
            "PyTorch in this image warned that it has no kernels built for the Spark's GB10 "
            "GPU (sm_121). vLLM may still run (sm_120 kernels often do); if it stopped, "
            + _ARCH_ADVICE[0].lower()
            + _ARCH_ADVICE[1:]
        ),
    ),
]


_ERROR_RULES: list[_ErrorRule] = [
    # Tensor parallel over Ray (a pair of Sparks; docs/two-sparks.md). Ranks are placed
    # driver-first: rank 0 on the head Spark, rank 1 on the worker Spark.
    _ErrorRule(
        "ray_rank_died",
        re.compile(r"RayWorkerProc rank=\[?[\d, ]{1,20}\]? died unexpectedly"),
        _fixed(
            "A tensor-parallel rank died (rank 0 runs on the pair's head Spark, rank 1 on "
            "its worker Spark): that Spark's Ray node was stopped or killed, it ran out of "
            "memory, or the link between the Sparks went down. Check that Spark and the "
            "link, then start again."
        ),
    ),
    _ErrorRule(
        "ray_no_gpus",
        re.compile(r"Cannot provide a placement group requiring \d+ GPUs"),
        _fixed(
            "The Ray cluster never had a GPU for every rank: a pair needs both Sparks' Ray "
            "nodes joined, each declaring its GPU. Check that the worker Spark joined (its "
            "worker, the link, the pair's addresses) — docs/two-sparks.md."
        ),
    ),
    _ErrorRule(
        "world_size_gpus",
        re.compile(r"World size \(\d+\) is larger than the number of available GPUs"),
        _fixed(
            "Tensor parallel above 1 needs one GPU per rank and a Spark has one: run the "
            "recipe on a pair of Sparks (the panel adds --distributed-executor-backend ray), "
            "or set tensor parallel to 1."
        ),
    ),
    _ErrorRule(
        "free_memory",
        # "... is less than desired GPU memory utilization (0.92, 111.96 GiB)" and, with
        # weights held by another process, "... is less than the engine's budget after
        # excluding external process's weights (0.9, 98.00 GiB)".
        re.compile(
            r"Free memory on device.{0,200}?less than (?:desired GPU memory|the engine's budget)",
            re.I,
        ),
        _free_memory,
    ),
    # Before the KV-size rule: sparksim's message also mentions max_model_len.
    _ErrorRule("max_num_seqs", re.compile(r"recurrent state of max_num_seqs", re.I), _recurrent),
    _ErrorRule(
        "kv_too_small",
        re.compile(
            r"max seq len\s*\(\s*[\d,]+\s*\).{0,400}?(?:larger than the maximum number of "
            r"tokens that can be stored in KV cache|larger than the available KV cache)"
            r"|estimated maximum model length is",
            re.I,
        ),
        _kv_too_small,
    ),
    _ErrorRule(
        "no_cache_memory",
        re.compile(r"No available memory for the cache blocks", re.I),
        _fixed(
            "The model's weights leave no room for the KV cache in the memory pool: raise "
            f"{_UTIL} (at most 0.90 on a Spark), use a smaller or quantized model (e.g. "
            "NVFP4), or add --enforce-eager to save the CUDA-graph memory."
        ),
    ),
    # Before the CUDA out-of-memory rule: vLLM appends torch's error to this line.
    _ErrorRule(
        "load_oom",
        re.compile(r"Failed to load model - not enough GPU memory", re.I),
        _fixed(
            "The model's weights do not fit in the memory the Spark has free (CPU and GPU "
            "share its 128 GB, less the operating system's share), so vLLM ran out of memory "
            "while loading them. Use a smaller or quantized checkpoint (NVFP4 or FP8 instead "
            "of BF16: a 70B model is 141 GB in BF16, about 40 GB in NVFP4). The KV cache needs "
            "room in the pool too: lower --max-model-len or --max-num-seqs, and raise "
            f"{_UTIL} only up to 0.90. The recipe page's memory plan shows what fits."
        ),
    ),
    _ErrorRule(
        "arch",
        re.compile(
            r"no kernel image is available for execution"
            r"|(?:unsupported|not supported)[^.\n]{0,100}?sm_121",
            re.I,
        ),
        _fixed(_ARCH_ADVICE),
    ),
    _ErrorRule(
        "illegal_memory_access",
        re.compile(r"illegal memory access", re.I),
        _fixed(
            "vLLM crashed with an illegal memory access (a GPU kernel fault). Check that the "
            "image is built for the Spark's GB10 GPU (sm_121), e.g. "
            "vllm/vllm-openai:cu130-nightly; if it is, report the crash with this log."
        ),
    ),
    _ErrorRule(
        "out_of_memory",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|CUDA error:\s*out of memory"
            r"|cudaErrorMemoryAllocation",
            re.I,
        ),
        _fixed(
            "CUDA ran out of memory. On a Spark the GPU shares the machine's one memory pool: "
            f"lower {_UTIL}, --max-model-len or --max-num-seqs, use --kv-cache-dtype fp8, add "
            "--enforce-eager to skip the CUDA-graph memory, or stop other processes using "
            "memory."
        ),
    ),
    _ErrorRule(
        "gated_model",
        re.compile(
            r"GatedRepoError|Access to model .{0,200}? is restricted|gated repo"
            r"|401 Client Error",
            re.I,
        ),
        _fixed(
            "Hugging Face refused the download: the model is gated or private. Accept its "
            "licence on huggingface.co and give the container a token (HF_TOKEN)."
        ),
    ),
]

_ENGINE_FAILED = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|Engine process failed to start",
    re.I,
)
# EngineDeadError: the API server is up but its engine process is gone. vLLM also logs it
# when it is stopped (SIGINT/SIGTERM) normally, so only a caller that knows the run was
# not being stopped may treat it as a failure.
_ENGINE_DEAD = re.compile(r"EngineCore encountered an issue|EngineDeadError", re.I)


def engine_died(line: str) -> bool:
    """The line is vLLM saying its engine process is gone (`EngineDeadError`, `EngineCore
    encountered an issue`) — also logged when it is stopped on purpose: the caller knows
    whether it was."""
    return bool(_ENGINE_DEAD.search(line))


_ENGINE_DEAD_ADVICE = (
    "vLLM's engine process (EngineCore) died while the API server stayed up; every request "
    "now fails. The reason is in the lines before this one; if there is none it was killed "
    "from outside (the kernel's out-of-memory killer leaves no log line: check the host's "
    "memory). Stop the run and start it again."
)
_ENGINE_FAILED_ADVICE = (
    "vLLM's engine failed to start; the reason is in the lines before this one (see the log tail)."
)
# `ValueError: msg`, `torch.OutOfMemoryError: msg`, also inside `... failed (load): XError: msg`.
_EXCEPTION = re.compile(
    r"(?:^|(?<=[\s:]))(?P<name>(?:[A-Za-z_]\w{0,60}\.){0,6}[A-Z]\w{0,60}?(?:Error|Exception))"
    r"(?:\s*:\s*(?P<msg>.+)|\s*$)"
)
_RANK_ENGINE_FAILED = 0
_RANK_EXCEPTION = 1


def _error_event(segment: str, message: str) -> LogEvent | None:
    argparse_error = _ARGPARSE.search(message)
    if argparse_error:
        return _argparse_event(segment, argparse_error)
    for rule in _ERROR_RULES:
        match = rule.pattern.search(message)
        if match:
            advice, facts = rule.advise(match)
            return LogEvent("error", error=segment, advice=advice, facts=facts, cause=rule.cause)
    if _ENGINE_DEAD.search(message):
        return LogEvent("error", error=segment, advice=_ENGINE_DEAD_ADVICE, cause="engine_dead")
    exception = _EXCEPTION.search(message)
    detail = (exception.group("msg") or "").strip() if exception else ""
    if exception and not _ENGINE_FAILED.search(detail):
        name = exception.group("name")
        short = detail if len(detail) <= 300 else detail[:297] + "..."
        said = f": {short}" if short else ""
        advice = (
            f"vLLM stopped with {name}{said}. The lines before it in the log usually show "
            "what it was doing."
        )
        return LogEvent("error", error=segment, advice=advice, cause="exception")
    if _ENGINE_FAILED.search(message):
        return LogEvent("error", error=segment, advice=_ENGINE_FAILED_ADVICE, cause="engine_failed")
    return None


def _warning_event(segment: str, message: str) -> LogEvent | None:
    for rule in _WARNING_RULES:
        match = rule.pattern.search(message)
        if match:
            advice, facts = rule.advise(match)
            return LogEvent("warning", error=segment, advice=advice, facts=facts, cause=rule.cause)
    return None


def _error_rank(event: LogEvent) -> int:
    if event.cause in ("engine_failed", "engine_dead"):
        return _RANK_ENGINE_FAILED
    if event.cause == "exception":
        return _RANK_EXCEPTION
    return 2


# --- public API ---------------------------------------------------------------------------


def _parse_segment(segment: str) -> LogEvent | None:
    level, message = _split_prefix(segment[:_MAX_SEARCH])
    warning = _warning_event(segment, message)
    if warning is not None:
        return warning
    if level in _ERROR_LEVELS:
        error = _error_event(segment, message)
        if error is not None:
            return error
    if _READY.search(message):
        return LogEvent("ready", Phase.SERVING, 100.0, "Ready")
    hits = [handler(m) for pattern, handler in _RULES if (m := pattern.search(message))]
    if not hits:
        return None
    # A line may carry two facts (KV size and concurrency share a line in some versions):
    # one event, in the latest phase any of them belongs to.
    phase = max((hit.phase for hit in hits), key=lambda p: p.rank)
    current = [hit for hit in hits if hit.phase == phase]
    facts: dict[str, Fact] = {}
    for hit in hits:
        facts.update(hit.facts)
    progress = any(hit.progress for hit in current)
    kind = "progress" if progress else ("fact" if facts else "phase")
    percent = next((hit.percent for hit in current if hit.percent is not None), None)
    step = next((hit.step for hit in current if hit.step), "")
    return LogEvent(kind, phase, percent, step, facts)


def parse_line(line: str) -> list[LogEvent]:
    """Events in one raw log line, in order; empty for lines that say nothing we track.

    A tqdm line with several `\\r`-separated updates yields one event per update (all of
    them, oldest first), so `LogFollower` ends on the latest and a caller may keep just
    `events[-1]`.
    """
    events: list[LogEvent] = []
    for segment in _segments(line):
        event = _parse_segment(segment)
        if event is not None:
            events.append(event)
    return events


# Facts of the served model that a speculative-decoding drafter logs again after it (its
# own "Resolved architecture", "Using max model len", "Loading weights took"): the first
# value is the served model's and stays.
_FIRST_WINS = frozenset(
    {"architecture", "max_model_len", "max_num_batched_tokens", "weights_load_s"}
)


class LogFollower:
    """Feed lines; keeps state (current phase, facts, last N lines for failure reports).

    The phase never goes backwards: a late line of an earlier phase (vLLM's processes
    interleave) still adds its facts but does not move the progress bar back. `percent`
    is 0-100 within the current phase: the shard counter while LOADING, CUDA graph
    capture while COMPILING; while LOADING it never goes back either, so a second weight
    load (a speculative-decoding drafter: "Loading drafter model...", then its own shard
    counter from 0) keeps the bar where it was. The first error that names a cause stays
    the reported one: vLLM follows the root cause with "Engine core initialization
    failed", which says less. `warning` is the first warning (a likely cause that is not
    fatal by itself); a later error that names no cause carries its advice too.
    """

    def __init__(self, keep_last: int = 40) -> None:
        if keep_last < 0:
            raise ValueError("keep_last must be 0 or more")
        self.phase: Phase = Phase.STARTING
        self.percent: float = 0.0
        self.step: str = ""
        self.facts: dict[str, Fact] = {}
        self.ready: bool = False
        self.error: LogEvent | None = None
        self.warning: LogEvent | None = None
        self._drafter = False
        self._tail: deque[str] = deque(maxlen=keep_last)

    def feed(self, line: str) -> list[LogEvent]:
        """Parse one line (or a chunk of lines), update the state, return its events."""
        events: list[LogEvent] = []
        for raw in line.split("\n"):
            raw = raw.rstrip("\r")
            if not raw.strip():
                continue
            self._tail.append(raw)
            for event in parse_line(raw):
                self._apply(event)
                events.append(event)
        return events

    def tail(self) -> list[str]:
        """The last keep_last raw lines (ANSI and `\\r` updates as received)."""
        return list(self._tail)

    def _apply(self, event: LogEvent) -> None:
        for key, value in event.facts.items():
            if key not in _FIRST_WINS or key not in self.facts:
                self.facts[key] = value
        if event.kind == "warning":
            if self.warning is None:
                self.warning = event
                if self.error is not None and _error_rank(self.error) < 2:
                    self.error = self._with_warning(self.error)
            return
        if event.kind == "error":
            if self.error is None or _error_rank(event) > _error_rank(self.error):
                self.error = self._with_warning(event) if _error_rank(event) < 2 else event
            return
        if event.kind == "ready":
            self.ready = True
        if event.phase is None or event.phase.rank < self.phase.rank:
            return
        if event.phase.rank > self.phase.rank:
            self.phase = event.phase
            self.percent = 0.0
        step = event.step
        if event.step == _DRAFTER_STEP:
            self._drafter = True
        elif self._drafter and step.startswith("Loading weights"):
            step = step.replace("Loading weights", "Loading drafter weights", 1)
        if event.percent is not None:
            percent = max(0.0, min(100.0, event.percent))
            self.percent = max(self.percent, percent) if self.phase is Phase.LOADING else percent
        if step:
            self.step = step

    def _with_warning(self, event: LogEvent) -> LogEvent:
        """An error that names no cause, with the earlier warning's advice after its own."""
        if self.warning is None:
            return event
        return replace(event, advice=f"{event.advice} {self.warning.advice}")

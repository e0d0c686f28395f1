"""Every log format string found in real vLLM's source is read by the log parser.

`vllm_adapter/contracts/vllm-<version>.json` holds, for each id in
`vllm_adapter.needles.LOG_LINES`, the format strings that `tools/vllm_contract.py` found in
that version's source (printf `%s`/`%.2f`, f-string `{}`, the logo's `${w}`). Each one is
rendered here with plausible values, given vLLM's log prefix (errors as the traceback's
last line, with and without the prefix), and fed to `LogFollower`: the phase and the fact
(or the failure's cause) that the panel shows must come out. A reworded line in a new
version fails this test, not a run on a Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from vllm_adapter import needles
from vllm_adapter.logparse import LogFollower, Phase

CONTRACTS = Path(__file__).resolve().parents[2] / "vllm_adapter" / "contracts"
VERSIONS = ["0.32.0", "0.33.0"]

INFO = "(EngineCore pid=45) INFO 12-01 07:13:07 [core.py:133] "
ERROR = "(EngineCore pid=45) ERROR 12-01 07:15:51 [core.py:1510] "

# Values for the placeholders of each id's formats, in order (a format takes as many as
# it has). Numbers are formatted with the placeholder's own precision.
SAMPLES: dict[str, list[object]] = {
    "server_version": ["0.33.0", "org/model"],
    "server_version_logo": ["0.33.0", "org/model"],
    "non_default_args": ["{'model': 'org/model', 'max_model_len': 131072, 'port': 8000}"],
    "engine_init": ["0.33.0", "model='org/model', speculative_config=None, max_seq_len=131072"],
    "architecture": ["NemotronHForCausalLM"],
    "max_model_len": [131072],
    "start_load": ["org/model"],
    "drafter_load": [],
    "weights_took": [12.34],
    "model_took": ["63.18", 679.875],
    "compile_start": ["[backbone] "],
    "dynamo": ["[backbone] ", 12.34],
    "compile_total": ["[backbone] ", 40.5],
    "profiling": ["[backbone] ", 0.87],
    "kv_memory": ["32.82"],
    "kv_size": ["GPU", "8,436,583", "131,072", 64.37],
    "concurrency": ["CPU", "1,048,576", "1,024", 1024.0],
    "graph_done": [20.4, 0.93],
    "init_engine": [65.0, 40.0, 30.0, 10.0],
    "server_start": ["http://0.0.0.0:8000"],
    "free_memory": ["cuda:0", "110.82", "121.7", "0.92", "111.96"],
    "kv_too_small": [131072, "24.0", "10.0", ""],
    "no_cache_memory": [],
    "load_oom": [],
    "engine_failed": ["{'EngineCore': 1}"],
    "engine_dead": [],
    "ray_rank_died": [[1]],
    "ray_no_gpus": [2, [{"GPU": 1.0}, {"GPU": 1.0}], 1800],
    "world_size_gpus": [2, 1],
}

Check = Callable[[LogFollower, str], None]


def facts(**expected: object) -> Check:
    def check(follower: LogFollower, _fmt: str) -> None:
        for key, value in expected.items():
            assert follower.facts.get(key) == value, (key, follower.facts)

    return check


def cause(name: str, **expected: object) -> Check:
    def check(follower: LogFollower, _fmt: str) -> None:
        assert follower.error is not None
        assert follower.error.cause == name, follower.error
        assert follower.error.advice
        facts(**expected)(follower, _fmt)

    return check


def kv_too_small(follower: LogFollower, fmt: str) -> None:
    # The main message carries max_model_len; its estimate sentence is a format of its own.
    key = "max_model_len" if "max seq len" in fmt else "estimated_max_model_len"
    cause("kv_too_small", **{key: 131072})(follower, fmt)


# id → (the phase reached, or None for a failure; what must have been read)
EXPECT: dict[str, tuple[Phase | None, Check]] = {
    "server_version": (Phase.STARTING, facts(vllm_version="0.33.0")),
    "server_version_logo": (Phase.STARTING, facts(vllm_version="0.33.0")),
    "non_default_args": (Phase.STARTING, facts(max_model_len=131072)),
    "engine_init": (Phase.STARTING, facts(vllm_version="0.33.0")),
    "architecture": (Phase.STARTING, facts(architecture="NemotronHForCausalLM")),
    "max_model_len": (Phase.STARTING, facts(max_model_len=131072)),
    "start_load": (Phase.LOADING, facts()),
    "drafter_load": (Phase.LOADING, facts()),
    "weights_took": (Phase.LOADING, facts(weights_load_s=12.34)),
    "model_took": (Phase.LOADING, facts(model_memory_gib=63.18, model_load_s=679.875)),
    "compile_start": (Phase.COMPILING, facts()),
    "dynamo": (Phase.COMPILING, facts()),
    "compile_total": (Phase.COMPILING, facts(compile_s=40.5)),
    "profiling": (Phase.COMPILING, facts()),
    "kv_memory": (Phase.COMPILING, facts(kv_cache_gib=32.82)),
    "kv_size": (
        Phase.COMPILING,
        facts(kv_cache_tokens=8436583, max_concurrency=64.37, max_concurrency_len=131072),
    ),
    "concurrency": (
        Phase.COMPILING,
        facts(kv_cache_tokens=1048576, max_concurrency=1024.0, max_concurrency_len=1024),
    ),
    "graph_done": (Phase.COMPILING, facts(graph_capture_s=20, graph_memory_gib=0.93)),
    "init_engine": (Phase.COMPILING, facts(init_engine_s=65.0, compile_s=40.0)),
    "server_start": (Phase.SERVING, facts()),
    "free_memory": (
        None,
        cause(
            "free_memory",
            free_memory_gib=110.82,
            total_memory_gib=121.7,
            requested_utilization=0.92,
            requested_memory_gib=111.96,
        ),
    ),
    "kv_too_small": (None, kv_too_small),
    "no_cache_memory": (None, cause("no_cache_memory")),
    "load_oom": (None, cause("load_oom")),
    "engine_failed": (None, cause("engine_failed")),
    "engine_dead": (None, cause("engine_dead")),
    "ray_rank_died": (None, cause("ray_rank_died")),
    "ray_no_gpus": (None, cause("ray_no_gpus")),
    "world_size_gpus": (None, cause("world_size_gpus")),
}

_PLACEHOLDER = re.compile(r"%%|%(?:\.(\d+))?([sdfrx])|\{[^{}]*\}|\$\{\w+\}")


def render(fmt: str, values: list[object]) -> str:
    """fmt with its placeholders filled in order; the logo's colour codes left out."""
    queue = list(values)

    def fill(m: re.Match[str]) -> str:
        text = m.group(0)
        if text == "%%":
            return "%"
        if text.startswith("${"):
            return ""
        assert queue, f"no sample value left for {text} in {fmt!r}"
        value = queue.pop(0)
        if m.group(2) == "f":
            return f"{float(value):.{int(m.group(1) or 6)}f}"  # type: ignore[arg-type]
        if m.group(2) == "d":
            return str(int(value))  # type: ignore[call-overload]
        return str(value)

    return _PLACEHOLDER.sub(fill, fmt)


def contract(version: str) -> dict:
    return json.loads((CONTRACTS / f"vllm-{version}.json").read_text(encoding="utf-8"))


def cases() -> list[tuple[str, str, str]]:
    out = []
    for version in VERSIONS:
        for key, entries in contract(version)["log_formats"].items():
            for entry in entries:
                out.append((version, key, entry["format"]))
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_the_contract_was_generated_with_todays_needles(version: str) -> None:
    formats = contract(version)["log_formats"]
    assert set(formats) == set(needles.LOG_LINES), (
        "regenerate the contracts: tools/vllm_contract.py write vllm_adapter/contracts/"
    )
    missing = [key for key, entries in formats.items() if not entries]
    assert missing == [], f"vLLM {version} no longer has these log lines: {missing}"


def test_every_needle_has_a_sample_and_an_expectation() -> None:
    assert set(SAMPLES) == set(needles.LOG_LINES) == set(EXPECT)


@pytest.mark.parametrize(("version", "key", "fmt"), cases())
def test_every_stored_format_is_read(version: str, key: str, fmt: str) -> None:
    text = render(fmt, SAMPLES[key])
    phase, check = EXPECT[key]
    if phase is not None:
        follower = LogFollower()
        follower.feed("\n".join(INFO + line for line in text.split("\n")))
        assert follower.error is None, follower.error
        assert follower.warning is None
        assert follower.phase is phase, (follower.phase, text)
        check(follower, fmt)
        return
    exception = "RuntimeError" if key.startswith("engine_") else "ValueError"
    for line in (ERROR + text, f"{exception}: {text}", ERROR + f"{exception}: {text}"):
        follower = LogFollower()
        follower.feed(line)
        check(follower, fmt)
        assert follower.ready is False


def test_render_fills_printf_fstring_and_template_placeholders() -> None:
    assert render("took %.2f s (%s) %d%% {} ${w}x${r}", [1, "a", 3.9, "b"]) == (
        "took 1.00 s (a) 3% b x"
    )
    with pytest.raises(AssertionError):
        render("%s %s", ["only one"])

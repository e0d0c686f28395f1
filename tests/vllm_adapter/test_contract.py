"""The contract rebuilds vLLM's own parser: checked line by line against the real one."""

from __future__ import annotations

import json

import pytest

from sparkdomain.command import UnsafeCommand, assert_safe_argv
from tests.vllm_adapter.real_parser import real_check
from vllm_adapter import contract
from vllm_adapter.contract import ArgvError

# Vectors chosen to exercise every rule of vLLM's parser that the panel depends on.
BATTERY = [
    ["--gpu-memory-utilization", "0.85", "--swap-space", "0"],  # removed in 0.18
    ["--dtype", "fp9"],  # invalid choice
    ["--max-num-seqs", "x"],  # invalid int
    ["--max-model-len", "1q"],  # invalid human-readable int
    ["--max-model-len", "1K", "--max_num_seqs", "2"],  # 1,024; underscores read as dashes
    ["--gpu-memory-utilization"],  # missing value
    ["--enable-prefix-caching=1"],  # a switch with a value
    ["--gpu-mem", "0.9"],  # a unique abbreviation
    ["--max", "3"],  # an ambiguous one
    ["--swap-space", "0", "--bogus", "--num-scheduler-steps", "8"],  # several unknown
    ["--tensor-parallel-size", "2.5"],
    ["--no-enable-prefix-caching", "--disable-prefix-caching", "--no-disable-prefix-caching"],
    ["extra"],  # a second positional
    ["--block-size", "abc"],
    ["--served-model-name", "a", "b", "--enforce-eager", "--kv-cache-dtype", "fp8"],
    ["--device-memory-utilization", "0.5"],  # the alias of --gpu-memory-utilization
]


def _mine(version: str, argv: list[str]) -> tuple[bool, str]:
    try:
        contract.load(version).parse(argv)
    except ArgvError as exc:
        return False, exc.line
    return True, ""


@pytest.mark.real_vllm
def test_the_rebuilt_parser_answers_exactly_as_vllm_0_33_0s_own_parser():
    vectors = [["vllm", "serve", "some/model", *flags] for flags in BATTERY]
    answer = real_check(vectors, "0.33.0", with_options=True)
    for real in answer["results"]:
        assert _mine("0.33.0", real["argv"]) == (real["ok"], real["error"]), real["argv"]
    # The committed contract is what this vLLM says today, not an edited copy.
    assert answer["vllm_version"] == "0.33.0"
    assert answer["options"] == contract.load("0.33.0").data["options"]


def test_contracts_are_versions_of_vllm_read_from_vllm():
    assert contract.available_versions() == ["0.32.0", "0.33.0"]
    assert contract.latest_version() == "0.33.0"
    data = contract.load("0.33.0").data
    assert data["generated_by"] == "tools/vllm_contract.py"
    assert "modelopt_fp4" in data["quantization_methods"]
    assert "nvfp4" not in data["quantization_methods"]
    assert not contract.load("0.33.0").has("--swap-space")
    with pytest.raises(KeyError, match=r"no contract for vLLM 0\.11\.0"):
        contract.load("0.11.0")
    with pytest.raises(KeyError):
        contract.load("../../etc/passwd")


def test_check_adds_what_vllm_refuses_when_it_builds_its_config():
    c = contract.load("0.33.0")
    problems = c.check(["vllm", "serve", "m", "--quantization", "nvfp4"])
    assert len(problems) == 1
    assert problems[0].message.startswith("Unknown quantization method: nvfp4. Must be one of [")
    assert "hf_quant_config.json" in problems[0].advice
    (swap,) = c.check(["vllm", "serve", "m", "--swap-space", "0"])
    assert swap.message == "vllm: error: unrecognized arguments: --swap-space 0"
    assert "removed in vLLM 0.18" in swap.advice
    assert c.check(["vllm", "serve", "m", "--reasoning-parser", "nemotron"])
    assert not c.check(["vllm", "serve", "m", "--reasoning-parser", "nemotron_v3"])
    assert c.check(["vllm", "serve", "m", "--kv-cache-dtype", "fp9"])


@pytest.mark.parametrize(
    "spelling",
    [
        ["--device-memory-utilization", "0.95"],
        ["--gpu_memory_utilization", "0.95"],
        ["--gpu-memory-utilization=0.95"],
    ],
)
def test_the_last_guard_counts_every_spelling_vllm_reads_as_the_utilization(spelling):
    with pytest.raises(UnsafeCommand):
        assert_safe_argv(["vllm", "serve", "m", *spelling])
    # ...and a second spelling next to a safe value is refused too.
    with pytest.raises(UnsafeCommand):
        assert_safe_argv(["vllm", "serve", "m", "--gpu-memory-utilization", "0.8", *spelling])


def test_abbreviations_of_the_utilization_are_refused_by_the_guard():
    with pytest.raises(UnsafeCommand, match="abbreviates"):
        assert_safe_argv(["vllm", "serve", "m", "--gpu-mem", "0.5"])


def test_contract_files_are_plain_json_with_the_expected_sections():
    for version in contract.available_versions():
        path = contract.CONTRACTS_DIR / f"vllm-{version}.json"
        data = json.loads(path.read_text())
        assert data["vllm_version"] == version
        for key in ("options", "quantization_methods", "reasoning_parsers", "tool_parsers",
                    "kv_cache_dtypes", "load_formats", "metrics", "log_formats"):  # fmt: skip
            assert data[key], (version, key)

"""sparksim parses its `serve` vector with the same contract as the panel: it refuses what
the imitated vLLM refuses, with vLLM's own lines and exit codes, and logs in that
version's own format strings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparksim.cli import LogFormats, split_sim_flags, vllm_args
from vllm_adapter import contract
from vllm_adapter.logparse import LogFollower

ROOT = Path(__file__).resolve().parents[2]


def sim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparksim", "serve", *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip


def test_an_unknown_option_exits_2_with_vllms_line():
    result = sim("m", "--gpu-memory-utilization", "0.8", "--swap-space", "0")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "vllm: error: unrecognized arguments: --swap-space 0"


def test_a_bad_choice_exits_2_as_vllm_does():
    result = sim("m", "--dtype", "fp9")
    assert result.returncode == 2
    assert "vllm serve: error: argument --dtype: invalid choice: 'fp9'" in result.stderr


def test_an_invalid_quantization_method_fails_when_the_config_is_built():
    result = sim("m", "--quantization", "nvfp4", "--time-scale", "100")
    assert result.returncode == 1
    assert "Unknown quantization method: nvfp4" in result.stderr


def test_simulator_flags_may_sit_anywhere_and_the_rest_is_vllms():
    sim_flags, rest = split_sim_flags(
        ["m", "--time-scale", "50", "--max-model-len", "1k", "--fault=crash_after:3"]
    )
    assert sim_flags == ["--time-scale", "50", "--fault=crash_after:3"]
    args = vllm_args(rest)
    assert (args.model, args.max_model_len, args.vllm_version) == ("m", 1000, "0.33.0")
    assert vllm_args(["m", "--max_num_seqs", "3"], "0.32.0").max_num_seqs == 3


@pytest.mark.parametrize("version", contract.available_versions())
def test_the_start_up_lines_are_the_versions_own_formats_and_the_parser_reads_them(version):
    fmt = LogFormats(version)
    line = fmt("kv_size", "?", "GPU", "1,234", "8,192", 3.5)
    # The format string came out of vLLM's source, recorded in the contract.
    assert line[0] in {e["format"] for e in contract.load(version).log_formats["kv_size"]}
    text = line[0] % line[1:]
    assert (
        text
        == "GPU KV cache size: 1,234 tokens, Maximum concurrency for 8,192 tokens per request: 3.50x"
    )
    follower = LogFollower()
    follower.feed(f"INFO 12-01 08:00:00 [kv_cache_utils.py:1148] {text}")
    assert follower.facts["kv_cache_tokens"] == 1234
    assert follower.facts["max_concurrency"] == 3.5


def test_version_reports_the_imitated_vllm(tmp_path):
    import socket
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparksim", "serve", "m", "--port", str(port),
         "--gpu-memory-utilization", "0.5", "--vllm-version", "0.32.0", "--time-scale", "1000"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/version", timeout=2)
                if answer.status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert answer.json()["version"] == "0.32.0"
    finally:
        proc.terminate()
        log = proc.communicate(timeout=20)[0]
    assert "vLLM server version 0.32.0, serving model m" in log

"""sparksim's decode speed against public DGX Spark measurements: the calibration table.

Each point is a public vLLM measurement on one DGX Spark (its source beside it) of a model
whose config.json is one of the project's own fixtures (tests/model_configs.py: the published configs'
architecture fields), and its checkpoint size. For each, a throwaway Hugging Face cache holds
only that config.json and a safetensors index with the size — no weights — and sparksim
serves the model from it exactly as vLLM would be started (`HF_HUB_CACHE`,
`HF_HUB_OFFLINE=1`, the measurement's flags); one streamed request of the measurement's
shape then gives sparksim's single-stream decode rate in simulated time. Printed: the
Markdown table docs/BENCHMARKS.md and docs/sparksim.md quote, with the error per row.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench._stack import ROOT, free_port, start_sparksim
from tests.model_configs import (
    GEMMA4_26B,
    GPT_OSS_20B,
    LLAMA_70B,
    NEMOTRON_NANO,
    QWEN36_MOE,
    hf_cache,
)

TIME_SCALE = 20.0
# Nemotron-3-Nano NVFP4's hf_quant_config.json: ModelOpt NVFP4 that leaves the head, the
# attention layers and the Mamba layer before each of them in bf16.
NANO_QUANT = {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
              "exclude_modules": ["lm_head"]
              + [f"backbone.layers.{i}.mixer.{p}" for i in (4, 11, 18, 25, 32, 41)
                 for p in ("in_proj", "out_proj")]
              + [f"backbone.layers.{i}.mixer.{p}_proj" for i in (5, 12, 19, 26, 33, 42)
                 for p in "qkvo"]}}  # fmt: skip
# (name, repo id, config, checkpoint bytes, hf_quant_config, flags, prompt, output,
#  measured tok/s, source)
POINTS = [
    ("Llama-3.3-70B NVFP4", "nvidia/Llama-3.3-70B-Instruct-NVFP4", LLAMA_70B, 42_709_041_152,
     None, ["--max-model-len", "16384", "--gpu-memory-utilization", "0.9"], 512, 256, 4.1,
     "NVIDIA/dgx-spark-playbooks #79 (4.0–4.2 tok/s; PR #91: 40.61 GB a token)"),
    ("gpt-oss-20b MXFP4", "openai/gpt-oss-20b", GPT_OSS_20B, 13_761_264_768, None,
     ["--max-model-len", "131072", "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8"],
     1024, 256, 46.47, "djangodevreng/dgx-spark-benchmarks gpt-oss-20b mxfp4 01-chat tg1024"),
    ("Nemotron-3-Nano-30B-A3B NVFP4", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4",
     NEMOTRON_NANO, 19_000_000_000, NANO_QUANT,
     ["--max-model-len", "131072", "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8",
      "--trust-remote-code"], 1024, 256, 63.14,
     "djangodevreng/dgx-spark-benchmarks nemotron-3-nano nvfp4 01-chat tg1024"),
    ("Qwen3.6-35B-A3B BF16", "Qwen/Qwen3.6-35B-A3B", QWEN36_MOE, 71_700_000_000, None,
     ["--max-model-len", "131072", "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8",
      "--language-model-only"], 1024, 256, 30.49,
     "djangodevreng/dgx-spark-benchmarks qwen-3.6-35b-a3b bf16 01-chat tg1024"),
    ("Gemma-4-26B-A4B BF16", "google/gemma-4-26B-A4B-it", GEMMA4_26B, 50_400_000_000, None,
     ["--max-model-len", "131072", "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8",
      "--max-num-batched-tokens", "8192"], 1024, 256, 24.12,
     "djangodevreng/dgx-spark-benchmarks gemma-4-26b-a4b-it bf16 01-chat tg1024"),
]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    import httpx

    from sparksim.probe import measure

    print(f"sparksim decode (one stream, simulated time, median of {args.repeats}) against "
          "public DGX Spark measurements")  # fmt: skip
    print("| model | measured tok/s | sparksim tok/s | error | source |")
    print("|---|---|---|---|---|")
    errors = []
    for name, repo, config, size, quant, flags, prompt, gen, measured, source in POINTS:
        with tempfile.TemporaryDirectory() as tmp:
            hub = Path(tmp) / "hub"
            env = hf_cache(hub, repo, config, size, quant)
            port = free_port()
            argv = [sys.executable, "-m", "sparksim", "serve", repo, "--port", str(port), *flags,
                    "--time-scale", str(TIME_SCALE), "--load-time-scale", "100000",
                    "--jit-seconds", "0", "--log-level", "WARNING"]  # fmt: skip
            # sparksim finds the checkpoint where vLLM would: the Hugging Face cache.
            os.environ.update(env)
            proc, url = start_sparksim(argv, port, ROOT / "var" / f"bench-speed-{port}.log")
            try:
                with httpx.Client(base_url=url, timeout=300) as client:
                    rates = sorted(measure(client, prompt, gen, scale=TIME_SCALE, seed=7 + r)["decode"]
                                   for r in range(args.repeats))  # fmt: skip
            finally:
                proc.terminate()
                proc.wait(timeout=10)
        sim = rates[len(rates) // 2]
        error = (sim - measured) / measured * 100
        errors.append(abs(error))
        print(f"| {name} | {measured:.1f} | {sim:.1f} | {error:+.1f} % | {source} |")
    errors.sort()
    print(f"\nmedian |error| {errors[len(errors) // 2]:.1f} %, worst {errors[-1]:.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

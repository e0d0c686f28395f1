"""DGX Spark facts, defined once (../shared/SPEC.md §1). Pure Python: no Django.

Units: GB = 10**9 bytes (memory sizes in the seeds and vendor sheets), GiB = 2**30 bytes
(what CUDA and vLLM report).
"""

from __future__ import annotations

from decimal import Decimal

GB = 10**9
GIB = 2**30
MIB = 2**20

# The one rule: above this --gpu-memory-utilization a Spark's shared memory pool can run
# out and the whole machine freezes (no OOM kill; recovery needs a power reset).
MAX_GPU_MEMORY_UTILIZATION = Decimal("0.90")
# vLLM's own default, which breaks the rule: the panel always passes the flag explicitly.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = Decimal("0.92")
# vLLM's default --max-num-seqs for its API server on a GB10 (vllm/engine/arg_utils.py,
# EngineArgs.get_batch_defaults in 0.33: "GB10 (DGX Spark, cc 12.1) has the memory but not
# the compute of a large discrete GPU, keep it on the small tier"), and its batched tokens.
VLLM_DEFAULT_MAX_NUM_SEQS = 256
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048

UTILIZATION_RULE = (
    "--gpu-memory-utilization must be above 0 and at most 0.90 on a DGX Spark: CPU and GPU "
    "share one 128 GB memory pool, and above 0.90 vLLM can take the memory the operating "
    "system needs, which freezes the whole machine until a power reset."
)

PHYSICAL_MEMORY_GB = 128.0
# What CUDA reports as total memory on GB10 (vLLM multiplies utilization by this).
CUDA_VISIBLE_GIB = 121.7
BANDWIDTH_GBS = 273.0  # 256-bit LPDDR5X at 8533 MT/s

# A GB10 decode step from what it reads, at one share of 273 GB/s for every kernel path vLLM
# runs on a Spark: 64.5 %, the geometric-mean fit over the public measurements whose kernels
# are stock vLLM's (docs/BENCHMARKS.md: 12 rows of 8 models, NVFP4 / MXFP4 / INT4 / FP8 /
# BF16, one to ten streams, MTP; no row off by more than 15 % at it). The anchor it started
# from: Llama-3.3-70B NVFP4 reads 40.61 GB a token and decodes 4.0–4.2 tok/s
# (NVIDIA/dgx-spark-playbooks #79, PR #91), 61 %. The fixed cost of a step with CUDA graphs
# is small (0.55 ms: what is left of Nemotron-3-Nano NVFP4's 2.55 GB step at 63.1 tok/s,
# djangodevreng/dgx-spark-benchmarks); without graphs every layer's kernels are launched
# from Python: the vLLM blog's Nemotron-3-Super went from 9.3 tok/s eager to 23.4 with
# graphs over 88 layers, 0.74 ms a layer. (Images with their own kernels differ: kubis.ai's
# gpt-oss-120b image runs eager at 57.5 tok/s, which stock weights cannot reach at all —
# docs/sparksim.md.) sparksim's checkpoint-read engine and the planner's capacity prediction
# (planner/roofline.py::users_at_rate) both decode at this pace.
DECODE_BANDWIDTH_SHARE = 0.645
GRAPH_STEP_SECONDS = 0.00055

# Seed 004's budget; the planner uses the upper bounds unless a host overrides them.
OS_RESERVE_GB = 6.0  # DGX OS + services: 4-6 GB
CUDA_CONTEXT_GB = 3.0  # CUDA runtime + context: 2-3 GB
CUDA_GRAPHS_GB = 5.0  # vLLM CUDA graphs: 3-5 GB (none with --enforce-eager)
# Below this much free memory the machine is at risk of freezing (seed 004: 2-3 GB).
FREEZE_MARGIN_GB = 3.0

# The memory guard's default lines (MemAvailable, GB like the seed), one set of rules for
# the planner, admission and the host agent's watchdog (docs/telemetry.md):
# * act (stop the run) at the top of the seed's 2-3 GB danger band, the freeze margin;
# * warn 1 GB above it. A stock Spark at the recommended 0.90 keeps
#   128 - 6 - 0.90 x 121.7 GiB = 4.39 GB free BY DESIGN, so the warn line must sit below
#   that (the old 8 GiB line fired on every run above ~0.87). The planner's "fits" needs
#   the headroom to reach the warn line: (128 - 6 - 4) GB / 130.67 GB = 0.903, so 0.90
#   stays the largest safe value on a stock Spark.
WATCHDOG_ACT_GB = FREEZE_MARGIN_GB
WATCHDOG_WARN_GB = 4.0

DEFAULT_IMAGE = "vllm/vllm-openai:cu130-nightly"
DEFAULT_PORT = 8000

# The slowest a Spark prefills, in prompt tokens per second: the guard's hang rule allows
# one prompt of the run's whole --max-model-len this long with nothing to show for it
# (apps/guard/hang.py, docs/guard.md "A long prefill is not a hang"). Conservative: the
# slowest prefill in the seeds is Llama-3.3-70B NVFP4, a dense 70B: 8,192 tokens in 9.8 s
# of TTFT, 0.35 s of it fixed (~870 tok/s; sparksim's LLAMA_70B profile). Attention's work
# per token grows with its position (layers x hidden x position against 2 x parameters for
# the rest: +8 % at 8k, +120 % at 128k, +240 % at 256k), which brings that model to
# ~420 tok/s on a 128k prompt, its longest, and would to ~270 tok/s on a 256k one; 200
# leaves a margin. The smaller and MoE models of the seeds prefill 1,500-2,500 tok/s.
PREFILL_TPS_FLOOR = 200.0

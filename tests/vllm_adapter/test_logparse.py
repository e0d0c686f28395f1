"""Start-up log parsing: progress, facts and friendly failures from vLLM's log (SPEC §3, §6).

The logs are written out here in the shapes vLLM V1 and sparksim print (and older vLLM
versions, where the wording differs), so the tests pin the formats, not the parser's
regexes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_adapter.logparse import LogEvent, LogFollower, Phase, parse_line

API = "(APIServer pid=123) INFO 11-29 08:50:01 [api_server.py:1800] "
CORE = "(EngineCore_0 pid=45) INFO 11-29 08:52:11 [gpu_model_runner.py:2602] "
CORE_ERR = "(EngineCore_0 pid=45) ERROR 11-29 08:53:00 [core.py:708] "


def sparksim_log() -> list[str]:
    """A complete start-up in sparksim's (= vLLM V1's) wording and prefix."""
    sim = "INFO 11-29 08:50:01 [cli.py:{}] "
    lines = [
        "vLLM API server version 0.11.1 (sparksim 0.1.0: simulated, no GPU)",
        "non-default args: {'model': 'nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4', "
        "'host': '0.0.0.0', 'port': 8000, 'gpu_memory_utilization': 0.85, "
        "'max_model_len': 131072, 'max_num_seqs': 4, 'kv_cache_dtype': 'fp8'}",
        "Resolved architecture: NemotronHForCausalLM",
        "Using max model len 131072",
        "Starting to load model nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4...",
    ]
    for k in range(1, 15):
        lines.append(
            f"Loading safetensors checkpoint shards: {round(100 * k / 14):3d}% Completed "
            f"| {k}/14 [04:50<06:27, 48.46s/it]"
        )
    lines += [
        "Loading weights took 678.38 seconds",
        "Model loading took 63.1786 GiB memory and 679.875000 seconds",
        "Dynamo bytecode transform time: 12.00 s",
        "Compiling a graph for dynamic shape takes 28.00 s",
        "torch.compile takes 40.00 s in total",
        "Available KV cache memory: 32.82 GiB",
        "GPU KV cache size: 8,436,583 tokens",
        "Maximum concurrency for 131,072 tokens per request: 64.37x",
    ]
    for k in range(1, 5):
        lines.append(
            f"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): {25 * k:3d}%| "
            f"{round(67 * k / 4)}/67"
        )
    lines += [
        "Graph capturing finished in 20 secs, took 0.93 GiB",
        "init engine (profile, create kv cache, warmup model) took 65.00 seconds",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
        "Serving model nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4 as nemotron",
        "Application startup complete.",
    ]
    return [sim.format(100 + i) + line for i, line in enumerate(lines)]


def only(events: list[LogEvent]) -> LogEvent:
    assert len(events) == 1, events
    return events[0]


# --- the happy path -------------------------------------------------------------------------


def test_full_startup_log_goes_through_the_phases_in_order() -> None:
    follower = LogFollower()
    seen: list[Phase] = []
    loading_percents: list[float] = []
    for line in sparksim_log():
        follower.feed(line)
        if not seen or seen[-1] != follower.phase:
            seen.append(follower.phase)
        if follower.phase is Phase.LOADING:
            loading_percents.append(follower.percent)

    assert seen == [Phase.STARTING, Phase.LOADING, Phase.COMPILING, Phase.SERVING]
    assert loading_percents == sorted(loading_percents)
    assert loading_percents[-1] == 100.0
    assert follower.ready is True
    assert follower.error is None
    assert follower.percent == 100.0
    assert follower.facts["kv_cache_tokens"] == 8436583
    assert follower.facts["max_concurrency"] == 64.37
    assert follower.facts["max_concurrency_len"] == 131072
    assert follower.facts["kv_cache_gib"] == 32.82
    assert follower.facts["model_memory_gib"] == 63.1786
    assert follower.facts["weights_load_s"] == 678.38
    assert follower.facts["architecture"] == "NemotronHForCausalLM"
    assert follower.facts["max_model_len"] == 131072
    assert follower.facts["compile_s"] == 40.0
    assert follower.facts["graph_capture_s"] == 20
    assert follower.facts["graph_memory_gib"] == 0.93
    assert follower.facts["init_engine_s"] == 65.0


def test_shard_progress_is_k_over_n() -> None:
    event = only(
        parse_line(
            "Loading safetensors checkpoint shards:  43% Completed | 6/14 [04:50<06:27, 48.46s/it]"
        )
    )
    assert event.kind == "progress"
    assert event.phase is Phase.LOADING
    assert event.percent == pytest.approx(100 * 6 / 14)
    assert event.step == "Loading weights 6/14"

    bare = only(parse_line("Loading safetensors checkpoint shards:  43% Completed | 6/14"))
    assert bare.percent == pytest.approx(100 * 6 / 14)
    done = only(
        parse_line(
            "Loading safetensors checkpoint shards: 100% Completed | 14/14 [11:18<00:00, 48.46s/it]"
        )
    )
    assert done.percent == 100.0


def test_graph_capture_progress_names_the_step() -> None:
    event = only(parse_line("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  50%| 34/67"))
    assert event.kind == "progress"
    assert event.phase is Phase.COMPILING
    assert event.percent == pytest.approx(100 * 34 / 67)
    assert event.step == "Capturing CUDA graphs 51 %"

    bar = only(
        parse_line(
            "Capturing CUDA graphs (decode, FULL):  50%|█████     | 34/67 [00:05<00:05, 6.1it/s]"
        )
    )
    assert bar.percent == pytest.approx(100 * 34 / 67)


def test_compile_steps_and_serving() -> None:
    for line in (
        "Dynamo bytecode transform time: 12.00 s",
        "Compiling a graph for dynamic shape takes 28.00 s",
    ):
        event = only(parse_line(line))
        assert (event.phase, event.step) == (Phase.COMPILING, "Compiling (torch.compile)")
    assert only(parse_line("torch.compile takes 40.00 s in total")).facts == {"compile_s": 40.0}

    for line in (
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
        "Starting vLLM API server on http://0.0.0.0:8000",
        "Starting vLLM server on http://0.0.0.0:8000",
    ):
        event = only(parse_line(line))
        assert (event.kind, event.phase) == ("phase", Phase.SERVING)
        assert "http://0.0.0.0:8000" in event.step

    ready = only(parse_line("INFO:     Application startup complete."))
    assert (ready.kind, ready.phase) == ("ready", Phase.SERVING)


def test_kv_cache_facts_on_one_line_make_one_event() -> None:
    event = only(
        parse_line(
            CORE + "GPU KV cache size: 8,436,583 tokens; "
            "Maximum concurrency for 131,072 tokens per request: 64.37x"
        )
    )
    assert event.kind == "fact"
    assert event.facts == {
        "kv_cache_tokens": 8436583,
        "max_concurrency": 64.37,
        "max_concurrency_len": 131072,
    }


def test_unrelated_lines_yield_nothing() -> None:
    assert parse_line(API + "Serving model x as y") == []
    assert parse_line("") == []
    assert parse_line("   \r  \n") == []
    assert parse_line(API + "Received request: prompt: 'ValueError: CUDA out of memory'") == []


# --- prefixes, ANSI colours, carriage returns -----------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        API,
        CORE,
        "(EngineCore_DP0 pid=45) (Worker pid=46) INFO 11-29 08:50:01.123 [loader.py:123] ",
        "INFO 08-06 10:00:00 model_runner.py:1014] ",  # older vLLM: no opening bracket
        "2025-11-29T08:50:01.123456789Z INFO 11-29 08:50:01 [loader.py:123] ",  # --timestamps
        "\x1b[32mINFO\x1b[0m 11-29 08:50:01 \x1b[2m[loader.py:123]\x1b[0m ",
        # a pair's worker line, forwarded by Ray (rank 0 on the driver's node, rank 1 not)
        "(RayWorkerProc pid=6712) INFO 11-29 08:50:01 [gpu_worker.py:312] ",
        "(RayWorkerProc pid=6713, ip=192.168.100.11) INFO 11-29 08:50:01 [gpu_worker.py:312] ",
    ],
)
def test_prefixes_do_not_matter(prefix: str) -> None:
    event = only(parse_line(prefix + "Available KV cache memory: 32.82 GiB"))
    assert event.facts == {"kv_cache_gib": 32.82}
    assert event.phase is Phase.COMPILING


def test_ansi_inside_the_message_is_ignored() -> None:
    event = only(parse_line("\x1b[1;36mGPU KV cache size:\x1b[0m \x1b[33m8,436,583\x1b[0m tokens"))
    assert event.facts == {"kv_cache_tokens": 8436583}


def test_carriage_return_updates_yield_every_update_in_order() -> None:
    line = "\r".join(
        f"Loading safetensors checkpoint shards: {round(100 * k / 14):3d}% Completed | {k}/14"
        for k in range(8)
    )
    events = parse_line(API + line + "\r")
    assert [e.kind for e in events] == ["progress"] * 8
    assert events[-1].step == "Loading weights 7/14"
    assert events[-1].percent == pytest.approx(50.0)

    follower = LogFollower()
    follower.feed(API + "Starting to load model nvidia/X...")
    follower.feed(API + line)
    assert (follower.phase, follower.step) == (Phase.LOADING, "Loading weights 7/14")
    assert follower.percent == pytest.approx(50.0)


def test_feed_accepts_a_chunk_of_lines() -> None:
    follower = LogFollower()
    events = follower.feed("Resolved architecture: LlamaForCausalLM\nUsing max model len 8192\n")
    assert [e.facts for e in events] == [
        {"architecture": "LlamaForCausalLM"},
        {"max_model_len": 8192},
    ]
    assert follower.tail() == [
        "Resolved architecture: LlamaForCausalLM",
        "Using max model len 8192",
    ]


# --- older vLLM versions ----------------------------------------------------------------------


def test_old_version_wording() -> None:
    assert only(parse_line("Loading model weights took 63.18 GB")).facts == {
        "model_memory_gib": 63.18
    }
    blocks = only(
        parse_line("INFO 08-06 10:00:00 executor_base.py:110] # GPU blocks: 12345, # CPU blocks: 0")
    )
    assert blocks.facts == {"kv_cache_blocks": 12345}
    assert blocks.phase is Phase.COMPILING
    assert only(parse_line("# cuda blocks: 2048, # CPU blocks: 512")).facts == {
        "kv_cache_blocks": 2048
    }
    concurrency = only(parse_line("Maximum concurrency for 8192 tokens per request: 3.52x"))
    assert concurrency.facts == {"max_concurrency": 3.52, "max_concurrency_len": 8192}

    start = only(
        parse_line(
            "INFO 08-06 10:00:00 model_runner.py:1400] Capturing cudagraphs for decoding. This "
            "may lead to unexpected consequences if the model is not static."
        )
    )
    assert (start.kind, start.phase, start.step) == (
        "phase",
        Phase.COMPILING,
        "Capturing CUDA graphs",
    )
    shapes = only(
        parse_line("Capturing CUDA graph shapes: 100%|██████████| 35/35 [00:10<00:00, 3.39it/s]")
    )
    assert shapes.percent == 100.0


# --- the follower's state ---------------------------------------------------------------------


def test_phase_never_goes_backwards() -> None:
    follower = LogFollower()
    follower.feed("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  50%| 34/67")
    follower.feed("Loading safetensors checkpoint shards:  43% Completed | 6/14")
    follower.feed("Model loading took 63.1786 GiB memory and 679.875000 seconds")
    assert follower.phase is Phase.COMPILING
    assert follower.percent == pytest.approx(100 * 34 / 67)
    assert follower.step.startswith("Capturing CUDA graphs")
    # ...but the late line's facts still count.
    assert follower.facts["model_memory_gib"] == 63.1786


def test_percent_restarts_with_each_phase() -> None:
    follower = LogFollower()
    follower.feed("Loading safetensors checkpoint shards: 100% Completed | 14/14")
    assert follower.percent == 100.0
    follower.feed("Dynamo bytecode transform time: 12.00 s")
    assert (follower.phase, follower.percent) == (Phase.COMPILING, 0.0)


def test_tail_keeps_the_last_n_raw_lines() -> None:
    follower = LogFollower(keep_last=3)
    for i in range(10):
        follower.feed(f"line {i}\n")
    assert follower.tail() == ["line 7", "line 8", "line 9"]
    assert LogFollower().tail() == []


# --- failures -----------------------------------------------------------------------------


def error_of(line: str) -> LogEvent:
    event = only(parse_line(line))
    assert event.kind == "error", event
    assert event.error
    assert event.advice
    return event


def test_free_memory_error() -> None:
    line = (
        CORE_ERR + "ValueError: Free memory on device (110.82/121.70 GiB) on startup is less "
        "than desired GPU memory utilization (0.92, 111.96 GiB). Decrease GPU memory "
        "utilization or reduce GPU memory used by other processes."
    )
    event = error_of(line)
    assert event.cause == "free_memory"
    assert event.advice == (
        "The Spark does not have that much memory free: lower --gpu-memory-utilization (at most "
        "0.90 on a Spark; the planner shows the largest safe value) or stop other processes "
        "using memory."
    )
    assert event.facts == {
        "free_memory_gib": 110.82,
        "total_memory_gib": 121.70,
        "requested_utilization": 0.92,
        "requested_memory_gib": 111.96,
    }
    assert "Free memory on device" in event.error


def test_no_cache_blocks_error() -> None:
    event = error_of(
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    )
    assert event.cause == "no_cache_memory"
    for word in ("--gpu-memory-utilization", "0.90", "quantized", "--enforce-eager"):
        assert word in event.advice


def test_kv_too_small_new_wording_gives_the_estimate() -> None:
    event = error_of(
        CORE_ERR + "ValueError: To serve at least one request with the models's max seq len "
        "(131072), (24.00 GiB KV cache is needed, which is larger than the available KV cache "
        "memory (10.00 GiB). Based on the available memory, the estimated maximum model length "
        "is 52000. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine."
    )
    assert event.cause == "kv_too_small"
    assert event.facts["estimated_max_model_len"] == 52000
    assert event.facts["max_model_len"] == 131072
    for word in ("--max-model-len", "52000", "--kv-cache-dtype fp8", "0.90"):
        assert word in event.advice


def test_kv_too_small_old_wording() -> None:
    event = error_of(
        "ValueError: The model's max seq len (131072) is larger than the maximum number of "
        "tokens that can be stored in KV cache (45000). Try increasing `gpu_memory_utilization` "
        "or decreasing `max_model_len` when initializing the engine."
    )
    assert event.cause == "kv_too_small"
    assert event.facts["estimated_max_model_len"] == 45000
    assert "--max-model-len to at most 45000" in event.advice


def test_recurrent_state_error() -> None:
    event = error_of(
        "ERROR 11-29 08:53:00 [cli.py:320] ValueError: The recurrent state of max_num_seqs=256 "
        "sequences (30.00 GiB) leaves too little of the available KV cache memory (32.82 GiB) "
        "for a request of max_model_len (131072). Try decreasing `max_num_seqs` or "
        "`max_model_len`, or increasing `gpu_memory_utilization`."
    )
    assert event.cause == "max_num_seqs"
    assert event.facts["max_num_seqs"] == 256
    assert "--max-num-seqs" in event.advice


@pytest.mark.parametrize(
    "line",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "RuntimeError: CUDA error: out of memory",
        "EngineCore failed to start (graphs): torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB. (while capturing CUDA graphs)",
    ],
)
def test_out_of_memory_error(line: str) -> None:
    event = error_of(CORE_ERR + line)
    assert event.cause == "out_of_memory"
    assert "memory" in event.advice
    assert "--gpu-memory-utilization" in event.advice


def test_illegal_memory_access_error() -> None:
    event = error_of("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert event.cause == "illegal_memory_access"
    assert "sm_121" in event.advice
    assert "report" in event.advice


def test_image_without_sm121_kernels() -> None:
    event = error_of(
        "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    )
    assert event.cause == "arch"
    assert "sm_121" in event.advice
    assert "cu130-nightly" in event.advice


@pytest.mark.parametrize(
    "line",
    [
        "NVIDIA GB10 with CUDA capability sm_121 is not compatible with the current PyTorch "
        "installation.",
        "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:283: UserWarning: Found "
        "GPU0 NVIDIA GB10 which is of cuda capability 12.1.",
        "UserWarning: Found GPU0 NVIDIA GB10 which is of compute capability (CC) 12.1.",
    ],
)
def test_pytorchs_sm121_warning_is_a_warning_not_an_error(line: str) -> None:
    event = only(parse_line(line))
    assert (event.kind, event.cause) == ("warning", "arch")
    assert "sm_121" in event.advice
    assert "cu130-nightly" in event.advice
    follower = LogFollower()
    follower.feed(line)
    follower.feed(API + "Starting to load model nvidia/X...")
    assert follower.error is None  # the start goes on
    assert follower.warning is not None
    assert follower.phase is Phase.LOADING


def test_a_causeless_error_after_the_sm121_warning_carries_its_advice() -> None:
    follower = LogFollower()
    follower.feed(
        "NVIDIA GB10 with CUDA capability sm_121 is not compatible with the current PyTorch"
    )
    follower.feed(CORE_ERR + "EngineCore failed to start.")
    assert follower.error is not None
    assert follower.error.cause == "engine_failed"
    assert "lines before" in follower.error.advice
    assert "sm_121" in follower.error.advice
    # ...but a named cause speaks for itself.
    follower.feed(CORE_ERR + "torch.OutOfMemoryError: CUDA out of memory.")
    assert follower.error.cause == "out_of_memory"
    assert "sm_121" not in follower.error.advice


def test_engine_failed_alone_is_a_generic_error() -> None:
    event = error_of(
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}"
    )
    assert event.cause == "engine_failed"
    assert "lines before" in event.advice


def test_traceback_last_line_is_a_generic_error_with_its_message() -> None:
    follower = LogFollower()
    for line in (
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/site-packages/vllm/engine.py", line 12, in run',
        "    raise KeyError(name)",
        "safetensors_rust.SafetensorError: Error while deserializing header: "
        "MetadataIncompleteBuffer",
    ):
        follower.feed(line)
    assert follower.error is not None
    assert follower.error.cause == "exception"
    assert "safetensors_rust.SafetensorError" in follower.error.advice
    assert "MetadataIncompleteBuffer" in follower.error.advice


def test_a_later_generic_error_does_not_overwrite_a_specific_one() -> None:
    follower = LogFollower()
    follower.feed(API + "Available KV cache memory: 32.82 GiB")
    follower.feed(
        CORE_ERR + "EngineCore failed to start (profile): ValueError: Free memory on device "
        "(104.21/121.69 GiB) on startup is less than desired GPU memory utilization (0.9, "
        "109.52 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    follower.feed(CORE_ERR + "Traceback (most recent call last):")
    follower.feed("KeyError: 'something downstream'")
    follower.feed(
        "ERROR 11-29 08:53:01 [cli.py:380] Engine core initialization failed. See root cause above."
    )
    assert follower.error is not None
    assert follower.error.cause == "free_memory"
    assert follower.facts["free_memory_gib"] == 104.21
    assert follower.ready is False


def test_a_specific_error_replaces_an_earlier_generic_one() -> None:
    follower = LogFollower()
    follower.feed("EngineCore failed to start.")
    follower.feed("torch.OutOfMemoryError: CUDA out of memory.")
    assert follower.error is not None
    assert follower.error.cause == "out_of_memory"


def test_errors_are_not_read_from_info_or_warning_lines() -> None:
    assert parse_line(API + "Received request: 'RuntimeError: CUDA error: out of memory'") == []
    assert (
        parse_line(
            "WARNING 11-29 08:50:01 [cli.py:210] crash (abrupt exit, like a CUDA error) once 500 "
            "generated tokens have been streamed in total"
        )
        == []
    )


def test_argparse_errors_name_the_flag() -> None:
    unknown = error_of("vllm: error: unrecognized arguments: --swap-space 0")
    assert unknown.cause == "bad_argument"
    assert unknown.facts == {"bad_flag": "--swap-space"}
    assert "removed in vLLM 0.18" in unknown.advice
    two = error_of("vllm serve: error: unrecognized arguments: --foo-bar 3 --baz")
    assert two.facts == {"bad_flag": "--foo-bar"}
    assert "--foo-bar" in two.advice and "--baz" in two.advice
    assert "check its spelling" in two.advice

    choice = error_of(
        "vllm serve: error: argument --dtype: invalid choice: 'float99' (choose from 'auto', "
        "'bfloat16', 'float', 'float16', 'float32', 'half')"
    )
    assert choice.facts == {"bad_flag": "--dtype", "bad_value": "float99"}
    assert "--dtype does not take 'float99'" in choice.advice
    assert "'bfloat16'" in choice.advice
    # Python 3.12.8+ prints the choices without quotes.
    bare = error_of(
        "vllm serve: error: argument --dtype: invalid choice: 'x' (choose from auto, half)"
    )
    assert bare.facts["bad_value"] == "x"

    typed = error_of(
        "vllm serve: error: argument -tp/--tensor-parallel-size: invalid int value: 'two'"
    )
    assert typed.facts == {"bad_flag": "--tensor-parallel-size", "bad_value": "two"}
    assert "int" in typed.advice
    required = error_of("vllm serve: error: argument --max-model-len: expected one argument")
    assert required.facts == {"bad_flag": "--max-model-len"}
    assert "expected one argument" in required.advice


def test_argparse_lookalikes_are_not_argument_errors() -> None:
    # logged (INFO/WARNING) or not argparse's wording
    assert parse_line(API + "vllm: error: unrecognized arguments: --x") == []
    assert all(e.cause != "bad_argument" for e in parse_line("vllm: error: something else"))


def test_version_from_every_wording() -> None:
    for line, version in (
        ("vLLM server version 0.32.0, serving model sparkpanel/tiny-llama", "0.32.0"),
        ("vLLM API server version 0.11.1 (sparksim 0.1.0: simulated, no GPU)", "0.11.1"),
        (" ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0", "0.33.0"),
        (
            "\x1b[93m▄▄\x1b[0m \x1b[94m▄█\x1b[0m \x1b[1m█     █     █ ▀▄▀ █\x1b[0m  version "
            "\x1b[1m0.12.0rc2.dev14+g1a2b3c\x1b[0m",
            "0.12.0rc2.dev14+g1a2b3c",
        ),
        ("Initializing a V1 LLM engine (v0.33.0) with config: model='m'", "0.33.0"),
    ):
        event = only(parse_line(API + line))
        assert event.facts == {"vllm_version": version}, line
        assert event.phase is Phase.STARTING
    # a version elsewhere is not vLLM's
    assert parse_line(API + "transformers version 5.19.0 is installed") == []


def test_torch_compile_took_and_init_engine_compilation() -> None:
    assert only(parse_line("[backbone] torch.compile took 20.01 s in total")).facts == {
        "compile_s": 20.01
    }
    assert only(
        parse_line(
            "init engine (profile, create kv cache, warmup model) took 65.00 s "
            "(compilation: 40.00 s)"
        )
    ).facts == {"init_engine_s": 65.0, "compile_s": 40.0}
    assert only(
        parse_line("init engine (profile, create kv cache, warmup model) took 36.14 s")
    ).facts == {"init_engine_s": 36.14}


def test_cpu_kv_cache_size_and_concurrency_on_one_line() -> None:
    event = only(
        parse_line(
            "(EngineCore pid=10885) INFO 12-01 07:14:01 [kv_cache_utils.py:2327] CPU KV cache "
            "size: 1,048,576 tokens, Maximum concurrency for 1,024 tokens per request: 1024.00x"
        )
    )
    assert event.facts == {
        "kv_cache_tokens": 1048576,
        "max_concurrency": 1024.0,
        "max_concurrency_len": 1024,
    }
    host = only(
        parse_line(
            "GPU + host KV cache size: 2,000 tokens, Maximum concurrency for "
            "1,000 tokens per request: 2.00x"
        )
    )
    assert host.facts["kv_cache_tokens"] == 2000


def test_a_drafters_second_weight_load_keeps_the_bar_and_the_first_facts() -> None:
    follower = LogFollower()
    for line in (
        "Resolved architecture: NemotronHForCausalLM",
        "Using max model len 131072",
        "Resolved architecture: LlamaForCausalLM",  # the drafter's config
        "Using max model len 4096",
        "Starting to load model nvidia/X...",
        "Loading safetensors checkpoint shards:  50% Completed | 7/14",
        "Loading safetensors checkpoint shards: 100% Completed | 14/14",
        "Loading weights took 600.00 seconds",
        "Loading drafter model...",
        "Loading safetensors checkpoint shards:   0% Completed | 0/1",
    ):
        follower.feed(line)
    assert (follower.phase, follower.percent) == (Phase.LOADING, 100.0)
    assert follower.step == "Loading drafter weights 0/1"
    follower.feed("Loading weights took 2.00 seconds")
    assert follower.facts["weights_load_s"] == 600.0
    assert follower.facts["architecture"] == "NemotronHForCausalLM"
    assert follower.facts["max_model_len"] == 131072


def test_free_memory_error_with_externally_held_weights() -> None:
    event = error_of(
        CORE_ERR + "ValueError: Free memory on device cuda:0 (80.00/121.69 GiB) on startup is "
        "less than the engine's budget after excluding external process's weights (0.9, 98.00 "
        "GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    assert event.cause == "free_memory"
    assert event.facts["free_memory_gib"] == 80.0
    assert event.facts["requested_memory_gib"] == 98.0
    hint = (
        API + "Free memory on device (100.0/121.69 GiB) on startup. Desired GPU memory "
        "utilization is (0.9, 109.52 GiB). Actual usage is 70.0 GiB for consumed memory"
    )
    assert [e.kind for e in parse_line(hint)] == []


def test_engine_dead_is_its_own_cause() -> None:
    event = error_of(
        "(APIServer pid=1) ERROR 12-01 07:17:49 [async_llm.py:906] vllm.v1.engine.exceptions."
        "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
        "cause."
    )
    assert event.cause == "engine_dead"
    assert "EngineCore" in event.advice


# --- robustness ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\r\r\r",
        "\x1b[",
        "\x1b]0;title",
        "Loading safetensors checkpoint shards: 0/0",
        "Loading safetensors checkpoint shards:  0% Completed | 0/0 [00:00<?, ?it/s]",
        "GPU KV cache size: 99999999999999999999999999999 tokens",
        "Using max model len " + "9" * 5000,
        "Maximum concurrency for , tokens per request: .x",
        "(APIServer pid=) INFO [x.py:] " * 50,
        "Free memory on device (a/b GiB) on startup is less than desired GPU memory utilization",
        "Error: " * 1000,
        "A" * 20000 + "Error: x",
    ],
)
def test_garbage_never_raises(line: str) -> None:
    parse_line(line)
    follower = LogFollower()
    follower.feed(line)
    assert follower.phase in Phase


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    for event in parse_line(text):
        assert event.kind in {"phase", "progress", "fact", "error", "ready"}
        assert event.percent is None or 0.0 <= event.percent <= 100.0
    follower = LogFollower(keep_last=5)
    follower.feed(text)
    assert 0.0 <= follower.percent <= 100.0
    assert len(follower.tail()) <= 5


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(sparksim_log()), max_size=60))
def test_any_order_of_real_lines_keeps_the_phase_monotonic(lines: list[str]) -> None:
    follower = LogFollower()
    ranks = []
    for line in lines:
        follower.feed(line)
        ranks.append(list(Phase).index(follower.phase))
    assert ranks == sorted(ranks)


def test_chunked_prefill_says_the_most_tokens_one_step_prefills() -> None:
    """vLLM's SchedulerConfig line (config/scheduler.py), as real GB10 start-ups print it:
    the hang rule's allowance for one silent step comes from it (apps/guard/agent.py)."""
    follower = LogFollower()
    follower.feed(
        "(APIServer pid=1) INFO 12-06 10:00:00 [scheduler.py:252] Chunked prefill is enabled "
        "with max_num_batched_tokens=8192."
    )
    follower.feed("(APIServer pid=1) INFO 12-06 10:00:01 [scheduler.py:252] Chunked prefill is "
                  "enabled with max_num_batched_tokens=2048.")  # fmt: skip
    assert follower.facts["max_num_batched_tokens"] == 8192  # the first one the run said

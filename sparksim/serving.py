"""`python -m sparksim serve`: the HTTP server up at once (answering /health, and 503 on
/v1/models while loading), the start-up, then the engine and its metrics until a signal
stops the server; the simulated memory (and its meminfo file) throughout."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
from pathlib import Path

import uvicorn

from sparkdomain.planner import HostSpec
from sparkdomain.spark import GB
from sparksim.checkpoint import find as find_checkpoint
from sparksim.corpus import TextStream
from sparksim.decode import calibration_note
from sparksim.engine import Clock, Engine
from sparksim.facts import CHECKPOINT_ENV, checkpoint_architecture, host_spec
from sparksim.faults import Faults, parse_faults
from sparksim.memory import MeminfoWriter, MemoryModel, gb_per_min_to_bytes_per_s
from sparksim.metrics import VllmMetrics
from sparksim.profiles import Profile, resolve_profile
from sparksim.server import App, ServerState
from sparksim.startup import Plan, StartupFailed, startup
from sparksim.tensor_parallel import RayExecutor
from sparksim.tokenizer import DEFAULT_TOKENIZER
from sparksim.tool_choice import ToolParsing
from sparksim.vllm_errors import VllmErrors
from vllm_adapter import endpoints, speculative
from vllm_adapter.speculative import Speculation

log = logging.getLogger("sparksim")


async def serve(args) -> int:
    faults = parse_faults(args.fault)
    profile = resolve_profile(args.model, name=args.profile, quantization=args.quantization)
    if args.jit_seconds is not None:
        profile = dataclasses.replace(profile, jit_seconds=max(args.jit_seconds, 0.0))
    # What vLLM would load: the checkpoint in the Hugging Face cache, unless the panel
    # described it (SPARKSIM_CHECKPOINT) or a profile was asked for by name.
    checkpoint = None
    if not args.profile and not os.environ.get(CHECKPOINT_ENV):
        checkpoint = find_checkpoint(args.model, getattr(args, "revision", None))
    spec = speculative.from_config(
        getattr(args, "speculative_config", None),
        mtp_layers=checkpoint.model.mtp_layers if checkpoint is not None else 1,
        model_type=checkpoint.model.model_type if checkpoint is not None else "",
    )
    if checkpoint is not None:
        profile = dataclasses.replace(profile, architecture=checkpoint.architecture,
                                      architecture_name=checkpoint.architecture_name,
                                      reads=checkpoint.reads(args, spec))  # fmt: skip
        log.info("sparksim: %s from the Hugging Face cache at %s (%s); %s", args.model,
                 checkpoint.snapshot.commit[:12], _size_text(checkpoint),
                 calibration_note(checkpoint.model))  # fmt: skip
    if args.max_model_len is None or args.max_model_len < 0:
        # Blank: the model's own context when the checkpoint says it; auto (-1, the longest
        # that fits) and unknown models: the simulator serves 32K.
        native = _native_context(checkpoint)
        args.max_model_len = native if (native and args.max_model_len is None) else 32768
    names = args.served_model_name or [args.model]
    state = ServerState(
        model=args.model,
        served_names=names,
        max_model_len=args.max_model_len,
        faults=faults,
        reasoning=bool(args.reasoning_parser),
        tools=ToolParsing.from_args(args, profile.architecture_name),
        time_scale=args.time_scale,
        vllm_version=args.vllm_version,
        answers=args.answers,
        # vLLM: `args.api_key or [envs.VLLM_API_KEY]` (serve/middleware/register.py)
        api_keys=tuple(
            key
            for key in (getattr(args, "api_key", None) or [os.environ.get(endpoints.API_KEY_ENV)])
            if key
        ),
    )
    clock = Clock(args.time_scale)
    try:
        arch = checkpoint_architecture(profile.architecture)
        host = host_spec()
    except (ValueError, TypeError) as exc:
        log.error("sparksim: %s", exc)
        return 1
    memory = _memory_model(host, faults)
    tasks: list[asyncio.Task] = []
    writer = _start_meminfo(args, memory, clock, tasks)
    executor = _executor(args, memory)
    server = _QuietServer(_uvicorn_config(args, state))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # A stop is a clean shutdown with exit status 0, as an operator expects.
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    server_task = asyncio.create_task(server.serve())
    try:
        others = writer.others_bytes if writer is not None else None
        plan = await startup(args, profile, faults, memory, arch, host, executor, checkpoint,
                             others)  # fmt: skip
    except StartupFailed as exc:
        await _start_failed(exc, args, server, server_task, tasks)
        _release_memory(memory, writer)
        if executor is not None:
            executor.shutdown()
        return 1
    metrics = _metrics(args, names, plan, spec)
    engine = _engine(args, profile, metrics, clock, plan, faults, spec)
    if spec is not None:
        log.info("sparksim: speculative decoding %s", spec.describe())
    _warm_up()
    tasks.append(asyncio.create_task(engine.run()))
    state.metrics, state.engine, state.ready = metrics, engine, True
    dead: list[int] = []
    if executor is not None:
        executor.serving()
        tasks.append(asyncio.create_task(_watch_ranks(executor, server, args, dead)))
    log.info("Application startup complete.")
    await _quietly(server_task)
    log.info("Shutting down")
    for task in tasks:
        task.cancel()
    _release_memory(memory, writer)
    if executor is not None:
        await asyncio.to_thread(executor.shutdown)
    return 1 if dead else 0


def _size_text(checkpoint) -> str:
    size = checkpoint.size_bytes
    return f"checkpoint {size / GB:.2f} GB" if size else "checkpoint size unknown"


def _native_context(checkpoint) -> int | None:
    if checkpoint is None:
        return None
    return checkpoint.model.max_position_embeddings or None


def _executor(args, memory: MemoryModel) -> RayExecutor | None:
    """Tensor parallel over Ray: the ranks on the pair's Sparks (sparksim/tensor_parallel.py).
    Without the Ray backend the start-up refuses TP > 1 as vLLM does on a one-GPU Spark."""
    tp = args.tensor_parallel_size or 1
    if tp <= 1 or getattr(args, "distributed_executor_backend", None) != "ray":
        return None
    return RayExecutor(tp, time_scale=args.load_time_scale or args.time_scale,
                       physical_bytes=memory.physical_bytes, os_bytes=memory.os_bytes,
                       version=args.vllm_version)  # fmt: skip


async def _watch_ranks(executor: RayExecutor, server, args, dead: list[int]) -> None:
    """A rank died (its Spark, its Ray node or its process): the engine is dead and the
    server exits 1, as vLLM's API server does once its EngineCore is gone."""
    dead.extend(await executor.monitor())
    log.error("%s", VllmErrors(args.vllm_version).engine_dead())
    server.should_exit = True


def _memory_model(host: HostSpec, faults: Faults) -> MemoryModel:
    return MemoryModel(
        physical_bytes=int(host.physical_memory_gb * GB),
        os_bytes=int(host.os_reserve_gb * GB),
        growth_bytes_per_s=gb_per_min_to_bytes_per_s(faults.mem_growth_gb_per_min)
        if faults.mem_growth_gb_per_min
        else 0.0,
    )


def _start_meminfo(
    args, memory: MemoryModel, clock: Clock, tasks: list[asyncio.Task]
) -> MeminfoWriter | None:
    """With --meminfo-file: the file written now, then kept up to date by a task. Shared
    with any other server given the same file: the host's memory is theirs too."""
    if not args.meminfo_file:
        return None
    Path(args.meminfo_file).parent.mkdir(parents=True, exist_ok=True)
    writer = MeminfoWriter(args.meminfo_file, memory, clock=clock.sim, shared=True)
    writer.write_once()
    tasks.append(asyncio.create_task(writer.run()))
    return writer


def _uvicorn_config(args, state: ServerState) -> uvicorn.Config:
    return uvicorn.Config(
        App(state),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
    )


async def _start_failed(
    exc: StartupFailed, args, server: uvicorn.Server, server_task: asyncio.Task, tasks
) -> None:
    """vLLM's death at start-up: its log lines, then the server and its tasks stop."""
    for line in exc.before:
        log.error("%s", line)
    # EngineCore's logger.exception and its traceback, then the API server's own error:
    # one record, so a reader of the log never sees the first line without the cause.
    errors = VllmErrors(args.vllm_version)
    log.error("%s\n%s\n%s", errors.engine_core_failed(), exc, errors.engine_init_failed())
    server.should_exit = True
    await _quietly(server_task)
    for task in tasks:
        task.cancel()


def _metrics(args, names: list[str], plan: Plan, spec: Speculation | None) -> VllmMetrics:
    return VllmMetrics(
        model_name=names[0],
        num_speculative_tokens=spec.num_tokens if spec else 0,
        max_model_len=args.max_model_len,
        cache_config={
            "block_size": 16,
            "cache_dtype": args.kv_cache_dtype,
            "enable_prefix_caching": args.enable_prefix_caching,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "num_gpu_blocks": plan.blocks,
        },
    )


def _engine(
    args,
    profile: Profile,
    metrics: VllmMetrics,
    clock: Clock,
    plan: Plan,
    faults: Faults,
    spec: Speculation | None = None,
) -> Engine:
    return Engine(
        speculation=spec,
        profile=profile,
        architecture=profile.architecture,
        metrics=metrics,
        clock=clock,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_blocks=plan.blocks,
        blocks_at=plan.blocks_at,
        kv_cache_dtype=args.kv_cache_dtype,
        enable_prefix_caching=args.enable_prefix_caching,
        enforce_eager=args.enforce_eager,
        tensor_parallel_size=args.tensor_parallel_size or 1,
        hang_after_tokens=faults.hang_after_tokens,
    )


def _warm_up() -> None:
    """Build the tokenizer's vocabulary and the corpus now: done lazily on the first
    request it would delay that request's first token by tens of milliseconds."""
    TextStream(0).next_ids(1)
    TextStream(0, kind="reasoning").next_ids(1)
    TextStream(0, kind="markdown").next_ids(1)
    DEFAULT_TOKENIZER.decode(DEFAULT_TOKENIZER.encode("warm up"))


class _QuietServer(uvicorn.Server):
    """uvicorn's Server without its own signal handling (ours exits 0, uvicorn's re-raises)."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


def _release_memory(memory: MemoryModel, writer: MeminfoWriter | None) -> None:
    """A stopped server gives its memory back: the last meminfo written says so (and its
    footprint leaves the host's, so the other servers' next writes say so too)."""
    if writer is not None:
        writer.release()
    else:
        memory.release()


async def _quietly(task: asyncio.Task) -> None:
    with contextlib.suppress(asyncio.CancelledError, SystemExit, KeyboardInterrupt):
        await task

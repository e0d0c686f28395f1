"""`python -m sparksim serve <model> [flags]`: start-up, then serve until stopped.

Takes the same argument vector as `vllm serve` (the panel builds one vector for both), plus
the simulator's own flags. Start-up prints vLLM's log lines in vLLM's order with durations
from the model's profile, runs the same memory checks a Spark would fail, and only then
answers /v1/models.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import math
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from sparkdomain.planner import (
    Architecture,
    HostSpec,
    kv_bytes_per_sequence,
    kv_bytes_per_token_split,
    kv_element_bytes,
    weight_bytes,
)
from sparkdomain.spark import (
    CUDA_CONTEXT_GB,
    CUDA_VISIBLE_GIB,
    GB,
    GIB,
    MIB,
)
from sparksim import __version__, registry
from sparksim.corpus import TextStream
from sparksim.engine import Clock, Engine
from sparksim.facts import checkpoint_architecture, host_spec
from sparksim.faults import FAULT_HELP, Faults, FaultSpecError, fail_start_error, parse_faults
from sparksim.memory import MeminfoWriter, MemoryModel, gb_per_min_to_bytes_per_s
from sparksim.metrics import VllmMetrics
from sparksim.profiles import BUILTIN, Profile, resolve_profile
from sparksim.server import App, ServerState
from sparksim.tokenizer import DEFAULT_TOKENIZER
from sparksim.vllm_errors import VllmErrors, torch_oom
from vllm_adapter import contract as vllm_contract

log = logging.getLogger("sparksim")
VLLM_DEFAULT_UTILIZATION = 0.92
SIM_FLAGS = ("--profile", "--time-scale", "--load-time-scale", "--jit-seconds", "--fault",
             "--meminfo-file", "--log-level", "--vllm-version")  # fmt: skip
# What the simulator reads when the vector leaves a value to vLLM's own default resolution
# (vLLM picks these at run time from the platform; the contract records None).
SIM_DEFAULTS = {
    "host": "127.0.0.1",  # vLLM's default is all interfaces; the simulator's is loopback
    "port": 8000,
    "gpu_memory_utilization": VLLM_DEFAULT_UTILIZATION,
    "max_model_len": None,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "kv_cache_dtype": "auto",
    "quantization": None,
    "enable_prefix_caching": True,
    "enforce_eager": False,
    "tensor_parallel_size": 1,
    "reasoning_parser": None,
    "tool_call_parser": None,
    "served_model_name": None,
    "load_format": "auto",
}


class VllmArgsError(Exception):
    """vLLM would exit here: `code` and the lines it prints on stderr."""

    def __init__(self, code: int, lines: list[str]):
        super().__init__("\n".join(lines))
        self.code = code
        self.lines = lines


def split_sim_flags(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(simulator flags, the `vllm serve` vector): the simulator's own flags may sit
    anywhere in the vector (the process engine appends them)."""
    sim, rest = [], []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name = token.partition("=")[0]
        if name in SIM_FLAGS:
            sim.append(token)
            if "=" not in token and i + 1 < len(tokens):
                sim.append(tokens[i + 1])
                i += 1
        else:
            rest.append(token)
        i += 1
    return sim, rest


def vllm_args(tokens: list[str], version: str | None = None) -> argparse.Namespace:
    """Parse the `vllm serve` part as the imitated vLLM does: its parser (an unknown option
    exits 2 with vLLM's `unrecognized arguments` line), then the checks it makes when it
    builds its engine config (an invalid quantization method fails as vLLM fails)."""
    contract = vllm_contract.load(version)
    argv = ["vllm", "serve", *tokens]
    try:
        values = contract.parse(argv)
    except vllm_contract.ArgvError as exc:
        raise VllmArgsError(2, [exc.usage, exc.line]) from None
    problems = contract._check_values(values)
    if problems:
        raise VllmArgsError(1, [f"ValueError: {p.message}" for p in problems])
    if not values.get("model_tag"):
        raise VllmArgsError(2, ["usage: vllm serve [model_tag] [options]",
                                "vllm serve: error: a model is required"])  # fmt: skip
    merged = {**SIM_DEFAULTS, **values}
    merged["model"] = merged.pop("model_tag")
    merged["vllm_version"] = contract.version
    return argparse.Namespace(**merged)


SHARD_GB = 5.0


class StartupFailed(Exception):
    """vLLM would have died here: the message is the exception's line (the traceback's
    last), `before` what vLLM logged before EngineCore reported its failure."""

    def __init__(self, message: str, *, before: list[str] | None = None):
        super().__init__(message)
        self.before = list(before or [])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sparksim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="simulate `vllm serve`",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=FAULT_HELP,
    )
    # The vLLM part of the vector is parsed by the imitated vLLM's own contract (see
    # vllm_args); this parser holds only the simulator's flags.
    serve.add_argument("vllm_args", nargs=argparse.REMAINDER, help="`vllm serve` arguments")
    s = serve.add_argument_group("simulator")
    s.add_argument(
        "--profile",
        choices=[*BUILTIN, "generic"],
        default=None,
        help="model profile (default: matched from the model id)",
    )
    s.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="run N× faster than real time (durations are still reported in simulated seconds)",
    )
    s.add_argument(
        "--load-time-scale",
        type=float,
        default=None,
        help="time scale of start-up only (default: --time-scale)",
    )
    s.add_argument(
        "--jit-seconds",
        type=float,
        default=None,
        help="override the profile's one-off compile delay on the first request (0 skips it)",
    )
    s.add_argument(
        "--fault",
        action="append",
        default=None,
        metavar="SPEC",
        help="inject a fault (repeatable; see below)",
    )
    s.add_argument(
        "--meminfo-file",
        default=None,
        help="write a /proc/meminfo-format file with the simulated memory use",
    )
    s.add_argument("--log-level", default="INFO")
    s.add_argument(
        "--vllm-version",
        default=None,
        choices=vllm_contract.available_versions(),
        help="the vLLM version to imitate (its parser, defaults and log formats; "
        "default: the newest SparkPanel has a contract for)",
    )
    registry.add_parser(sub)
    return parser


_PLACEHOLDER = re.compile(r"%(?:\.\d+)?[sdf]|\{\}")


class LogFormats:
    """The imitated version's own format strings (from its contract), so sparksim's log is
    written in exactly the shapes that version prints; a line the version's source lacks
    falls back to the given format."""

    def __init__(self, version: str | None):
        self.formats = vllm_contract.load(version).log_formats

    def __call__(self, key: str, fallback: str, *values) -> tuple:
        for entry in self.formats.get(key, ()):
            text = entry["format"]
            if len(_PLACEHOLDER.findall(text)) == len(values) and "{}" not in text:
                return (text, *values)
        return (fallback, *values)


class VllmFormatter(logging.Formatter):
    """`INFO 11-29 08:50:01 [loader.py:123] message`, the shape vLLM prints; every line of
    a multi-line message carries the prefix, as vLLM's NewLineFormatter does."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(record.created))
        prefix = f"{record.levelname} {stamp} [{record.filename}:{record.lineno}] "
        return "\n".join(prefix + line for line in record.getMessage().split("\n"))


@dataclass
class Plan:
    weights: float
    pool: float
    graphs: float
    kv_available: float
    per_token: float
    per_seq_max: float
    state: float
    tokens: int
    blocks: int
    free_at_start: float
    total: float = CUDA_VISIBLE_GIB * GIB  # what CUDA reports as the device's memory
    context: float = CUDA_CONTEXT_GB * GB


def memory_plan(
    profile: Profile, args, arch: Architecture | None = None, host: HostSpec | None = None
) -> Plan:
    """Memory as the planner computes it: the same functions, from the recipe's checkpoint
    and the host's facts where the engine passed them (sparksim/facts.py)."""
    arch = arch or profile.architecture
    host = host or HostSpec()
    weights = weight_bytes(arch) or 0.0
    total = host.cuda_visible_gib * GIB
    pool = args.gpu_memory_utilization * total
    graphs = 0.0 if args.enforce_eager else host.cuda_graphs_gb * GB
    context = host.cuda_context_gb * GB
    kv_available = pool - context - graphs - weights
    element = kv_element_bytes(arch, args.kv_cache_dtype)
    split = kv_bytes_per_token_split(arch, element) or (0.0, 0.0)
    per_token = max(sum(split), 1.0)
    per_seq = kv_bytes_per_sequence(arch, element, args.max_model_len) or 0.0
    state = (arch.recurrent_state_mib or 0.0) * MIB
    for_tokens = kv_available - args.max_num_seqs * state if state else kv_available
    tokens = max(int(for_tokens // per_token), 0)
    # What CUDA finds free when the worker starts: all but the OS and the CUDA context.
    free_at_start = (host.physical_memory_gb - host.os_reserve_gb - host.cuda_context_gb) * GB
    return Plan(
        weights,
        pool,
        graphs,
        kv_available,
        per_token,
        per_seq,
        state,
        tokens,
        tokens // 16,
        free_at_start,
        total,
        context,
    )


async def startup(
    args,
    profile: Profile,
    faults: Faults,
    memory: MemoryModel,
    arch: Architecture | None = None,
    host: HostSpec | None = None,
) -> Plan:
    scale = (args.load_time_scale or args.time_scale) / faults.slow_start_factor

    async def pause(sim_seconds: float) -> None:
        await asyncio.sleep(sim_seconds / scale)

    name = args.served_model_name[0] if args.served_model_name else args.model
    fmt = LogFormats(args.vllm_version)
    log.info(*fmt("server_version", "vLLM server version %s, serving model %s",
                  args.vllm_version, name))  # fmt: skip
    log.info("sparksim %s: a simulation of vLLM %s, no GPU", __version__, args.vllm_version)
    non_default = {
        "model": args.model,
        "host": args.host,
        "port": args.port,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "kv_cache_dtype": args.kv_cache_dtype,
        "quantization": args.quantization,
        "enforce_eager": args.enforce_eager,
    }
    log.info(
        "non-default args: %s", {k: v for k, v in non_default.items() if v not in (None, False)}
    )
    for line in faults.describe():
        log.warning(line)
    log.info("Resolved architecture: %s", profile.architecture_name)
    log.info("Using max model len %s", args.max_model_len)
    config = (
        f"model={args.model!r}, max_seq_len={args.max_model_len}, quantization={args.quantization}"
    )
    log.info(*fmt("engine_init", "Initializing a V1 LLM engine (v%s) with config: %s",
                  args.vllm_version, config))  # fmt: skip
    plan = memory_plan(profile, args, arch, host)
    errors = VllmErrors(args.vllm_version)
    await pause(3.0)
    # (1) vLLM's request_memory, as the worker initialises its device: the pool it asks
    # for (utilization × what CUDA reports) must be free before a weight is loaded.
    if plan.pool > plan.free_at_start:
        raise StartupFailed(
            errors.free_memory(
                free=plan.free_at_start, total=plan.total, utilization=args.gpu_memory_utilization
            )
        )

    log.info("Starting to load model %s...", args.model)
    memory.set_footprint(int(plan.context))
    fast = 3.0 if getattr(args, "load_format", None) == "fastsafetensors" else 1.0
    load_seconds = plan.weights / GB / (profile.load_gbps * fast)
    shards = max(1, math.ceil(plan.weights / GB / SHARD_GB))
    per_shard = load_seconds / shards
    for k in range(1, shards + 1):
        await pause(per_shard)
        if plan.weights * k / shards > plan.free_at_start:
            # (2) Weights do not fit in what is free: CUDA's out-of-memory error mid-load,
            # which vLLM's load_model logs with its advice before re-raising it.
            loaded = plan.weights * (k - 1) / shards
            oom = torch_oom(
                tried=plan.weights / shards,
                total=plan.total,
                free=plan.free_at_start - loaded,
                in_use=plan.context + loaded,
            )
            raise StartupFailed(f"torch.OutOfMemoryError: {oom}", before=[errors.load_oom(oom)])
        memory.set_footprint(int(plan.context + plan.weights * k / shards))
        elapsed, remaining = per_shard * k, per_shard * (shards - k)
        log.info(
            "Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [%s<%s, %.2fs/it]",
            round(100 * k / shards),
            k,
            shards,
            _mmss(elapsed),
            _mmss(remaining),
            per_shard,
        )
        if faults.fail_start_phase == "load" and k * 2 >= shards:
            raise StartupFailed(fail_start_error("load"))
    log.info("Loading weights took %.2f seconds", load_seconds)
    log.info(
        *fmt(
            "model_took",
            "Model loading took %s GiB memory and %.6f seconds",
            f"{plan.weights / GIB:.4f}",
            load_seconds + 1.5,
        )
    )

    if not args.enforce_eager:
        await pause(profile.compile_seconds * 0.3)
        log.info(*fmt("dynamo", "%sDynamo bytecode transform time: %.2f s", "",
                      profile.compile_seconds * 0.3))  # fmt: skip
        await pause(profile.compile_seconds * 0.7)
        log.info("Compiling a graph for dynamic shape takes %.2f s", profile.compile_seconds * 0.7)
        log.info(*fmt("compile_total", "%storch.compile took %.2f s in total", "",
                      profile.compile_seconds))  # fmt: skip

    await pause(5.0)  # memory profiling run
    if faults.fail_start_phase == "profile":
        raise StartupFailed(fail_start_error("profile"))
    if plan.kv_available <= 0:
        # (3) Nothing of the pool is left for the KV cache after the profiling run.
        raise StartupFailed(errors.no_cache_memory())
    memory.set_footprint(int(plan.pool))
    log.info("Available KV cache memory: %.2f GiB", plan.kv_available / GIB)
    seq_tokens = max(plan.per_seq_max / plan.per_token, 1.0)
    log.info(
        *fmt(
            "kv_size",
            "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx",
            "GPU",
            f"{plan.tokens:,}",
            f"{args.max_model_len:,}",
            plan.tokens / seq_tokens,
        )
    )
    states = args.max_num_seqs * plan.state
    if states and plan.per_seq_max + plan.state <= plan.kv_available < states + plan.per_seq_max:
        raise StartupFailed(
            f"ValueError: The recurrent state of max_num_seqs={args.max_num_seqs} sequences "
            f"({states / GIB:.2f} GiB) leaves too little of the available KV cache memory "
            f"({plan.kv_available / GIB:.2f} GiB) for a request of max_model_len "
            f"({args.max_model_len}). Try decreasing `max_num_seqs` or `max_model_len`, or "
            "increasing `gpu_memory_utilization`."
        )
    if plan.per_seq_max + plan.state > plan.kv_available:
        # (4) One request at max_model_len needs more KV cache than there is.
        estimated = min(int((plan.kv_available - plan.state) // plan.per_token), plan.tokens)
        raise StartupFailed(
            errors.kv_too_small(
                max_model_len=args.max_model_len,
                needed=plan.per_seq_max + plan.state,
                available=plan.kv_available,
                estimated=max(estimated, 0),
            )
        )

    if not args.enforce_eager:
        steps = 4
        for k in range(1, steps + 1):
            await pause(profile.graph_capture_seconds / steps)
            log.info(
                "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): %3d%%| %d/67",
                25 * k,
                round(67 * k / steps),
            )
            if faults.fail_start_phase == "graphs" and k == 2:
                raise StartupFailed(fail_start_error("graphs"))
        log.info(
            *fmt(
                "graph_done",
                "Graph capturing finished in %.0f secs, took %.2f GiB",
                profile.graph_capture_seconds,
                plan.graphs / GIB * 0.2,
            )
        )
    init = 5.0 + (
        0 if args.enforce_eager else profile.graph_capture_seconds + profile.compile_seconds
    )
    compiled = 0 if args.enforce_eager else profile.compile_seconds
    log.info(*fmt("init_engine", "init engine (profile, create kv cache, warmup model) took %.2f s "
                  "(compilation: %.2f s)", init, compiled))  # fmt: skip
    log.info(*fmt("server_start", "Starting vLLM server on %s", f"http://{args.host}:{args.port}"))
    return plan


def _mmss(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


async def serve(args) -> int:
    faults = parse_faults(args.fault)
    profile = resolve_profile(args.model, name=args.profile, quantization=args.quantization)
    if args.jit_seconds is not None:
        profile = dataclasses.replace(profile, jit_seconds=max(args.jit_seconds, 0.0))
    if args.max_model_len is None:
        args.max_model_len = 32768
    names = args.served_model_name or [args.model]
    state = ServerState(
        model=args.model,
        served_names=names,
        max_model_len=args.max_model_len,
        faults=faults,
        reasoning=bool(args.reasoning_parser),
        time_scale=args.time_scale,
        vllm_version=args.vllm_version,
    )
    clock = Clock(args.time_scale)
    try:
        arch = checkpoint_architecture(profile.architecture)
        host = host_spec()
    except (ValueError, TypeError) as exc:
        log.error("sparksim: %s", exc)
        return 1
    memory = MemoryModel(
        physical_bytes=int(host.physical_memory_gb * GB),
        os_bytes=int(host.os_reserve_gb * GB),
        growth_bytes_per_s=gb_per_min_to_bytes_per_s(faults.mem_growth_gb_per_min)
        if faults.mem_growth_gb_per_min
        else 0.0,
    )
    tasks: list[asyncio.Task] = []
    writer: MeminfoWriter | None = None
    if args.meminfo_file:
        Path(args.meminfo_file).parent.mkdir(parents=True, exist_ok=True)
        writer = MeminfoWriter(args.meminfo_file, memory, clock=clock.sim)
        writer.write_once()
        tasks.append(asyncio.create_task(writer.run()))
    config = uvicorn.Config(
        App(state),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
    )
    server = _QuietServer(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # A stop is a clean shutdown with exit status 0, as an operator expects.
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    server_task = asyncio.create_task(server.serve())
    try:
        plan = await startup(args, profile, faults, memory, arch, host)
    except StartupFailed as exc:
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
        _release_memory(memory, writer)
        return 1
    metrics = VllmMetrics(
        model_name=names[0],
        max_model_len=args.max_model_len,
        cache_config={
            "block_size": 16,
            "cache_dtype": args.kv_cache_dtype,
            "enable_prefix_caching": args.enable_prefix_caching,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "num_gpu_blocks": plan.blocks,
        },
    )
    engine = Engine(
        profile=profile,
        architecture=profile.architecture,
        metrics=metrics,
        clock=clock,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_blocks=plan.blocks,
        kv_cache_dtype=args.kv_cache_dtype,
        enable_prefix_caching=args.enable_prefix_caching,
        enforce_eager=args.enforce_eager,
    )
    # Build the tokenizer's vocabulary and the corpus now: done lazily on the first request
    # it would delay that request's first token by tens of milliseconds.
    TextStream(0).next_ids(1)
    TextStream(0, kind="reasoning").next_ids(1)
    DEFAULT_TOKENIZER.decode(DEFAULT_TOKENIZER.encode("warm up"))
    tasks.append(asyncio.create_task(engine.run()))
    state.metrics, state.engine, state.ready = metrics, engine, True
    log.info("Application startup complete.")
    await _quietly(server_task)
    log.info("Shutting down")
    for task in tasks:
        task.cancel()
    _release_memory(memory, writer)
    return 0


class _QuietServer(uvicorn.Server):
    """uvicorn's Server without its own signal handling (ours exits 0, uvicorn's re-raises)."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


def _release_memory(memory: MemoryModel, writer: MeminfoWriter | None) -> None:
    """A stopped server gives its memory back: the last meminfo written says so."""
    memory.set_footprint(0)
    memory.growth_bytes_per_s = 0.0
    if writer is not None:
        writer.write_once()


async def _quietly(task: asyncio.Task) -> None:
    with contextlib.suppress(asyncio.CancelledError, SystemExit, KeyboardInterrupt):
        await task


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    tokens = list(sys.argv[1:] if argv is None else argv)
    if tokens[:1] == ["serve"]:
        sim, rest = split_sim_flags(tokens[1:])
        args = parser.parse_args(["serve", *sim])
        try:
            vllm = vllm_args(rest, args.vllm_version)
        except VllmArgsError as exc:
            for line in exc.lines:
                print(line, file=sys.stderr)
            return exc.code
        for key, value in vars(vllm).items():
            setattr(args, key, value)
    else:
        args = parser.parse_args(tokens)
    if args.command == "registry":
        return registry.run(args)
    try:
        parse_faults(args.fault)
    except FaultSpecError as exc:
        parser.error(str(exc))
    if args.time_scale <= 0 or (args.load_time_scale is not None and args.load_time_scale <= 0):
        parser.error("--time-scale and --load-time-scale must be positive")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(VllmFormatter())
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler], force=True)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        runner = asyncio.run
    return runner(serve(args))

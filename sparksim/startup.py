"""sparksim's start-up: vLLM's log lines in vLLM's order, in the imitated version's own
formats, with durations from the model's profile, and the memory checks a Spark would fail
(the same planner functions SparkPanel plans with), phase by phase as vLLM meets them:
the device's free memory, the weight load, torch.compile, the profiling run and the KV
cache, the CUDA graph capture."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from sparkdomain.planner import (
    Architecture,
    HostSpec,
    kv_bytes_per_sequence,
    kv_bytes_per_token_split,
    kv_element_bytes,
    weight_bytes,
)
from sparkdomain.spark import CUDA_CONTEXT_GB, CUDA_VISIBLE_GIB, GB, GIB, MIB
from sparksim import __version__
from sparksim.faults import Faults, fail_start_error
from sparksim.memory import MemoryModel
from sparksim.profiles import Profile
from sparksim.tensor_parallel import ExecutorError, RayExecutor, backend_problem
from sparksim.vllm_errors import VllmErrors, torch_oom
from vllm_adapter import contract as vllm_contract

log = logging.getLogger("sparksim")
SHARD_GB = 5.0


class StartupFailed(Exception):
    """vLLM would have died here: the message is the exception's line (the traceback's
    last), `before` what vLLM logged before EngineCore reported its failure."""

    def __init__(self, message: str, *, before: list[str] | None = None):
        super().__init__(message)
        self.before = list(before or [])


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


DEFAULT_BLOCK_TOKENS = 16  # vLLM's block size without a layout that raises it


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
    # vLLM's own accounting for the command (vllm_adapter/startup), when sparksim knows the
    # checkpoint: its figures and its refusal are the ones the start-up prints.
    prediction: object | None = None

    def blocks_at(self, tokens: int) -> int:
        """The KV blocks a request of `tokens` tokens holds: vLLM's layout for the command
        when sparksim predicted it (every KV cache group: a hybrid's state blocks and its
        big attention blocks, a sliding window's capped ones), else 16-token blocks."""
        lay = getattr(self.prediction, "layout", None)
        if lay is not None and lay.per_group:
            return lay.blocks_at(tokens)
        return -(-tokens // DEFAULT_BLOCK_TOKENS)


def memory_plan(
    profile: Profile,
    args,
    arch: Architecture | None = None,
    host: HostSpec | None = None,
    checkpoint=None,
    others_bytes: float = 0.0,
) -> Plan:
    """Memory as the planner computes it: the same functions, from the recipe's checkpoint
    and the host's facts where the engine passed them (sparksim/facts.py). With the
    checkpoint from the cache (sparksim/checkpoint.py), the weights, the KV cache and the
    verdict are vLLM's own accounting for the command (`predicted_plan`).

    `others_bytes`: what other servers on the same host hold as this one starts. They
    lower only what is free at start (vLLM's start gate, the weight load), never the KV
    cache, which vLLM sizes from this server's own utilization budget."""
    plan = _planner_plan(profile, args, arch, host, others_bytes)
    if checkpoint is not None and getattr(args, "vllm_argv", None):
        return predicted_plan(plan, args, checkpoint, host or HostSpec())
    return plan


def predicted_plan(plan: Plan, args, checkpoint, host: HostSpec) -> Plan:
    """The plan with vLLM's start-up prediction for this exact command: what "Model loading
    took", "Available KV cache memory" and "GPU KV cache size" will say, per rank."""
    import os

    from vllm_adapter.startup import ModelConfigError, predict

    env = {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}
    size = checkpoint.size_bytes
    try:
        p = predict(checkpoint.config, list(args.vllm_argv), vllm_version=args.vllm_version,
                    total_gib=host.cuda_visible_gib, free_gib=plan.free_at_start / GIB,
                    checkpoint_gib=size / GIB if size else None, env=env,
                    drafter_gib=_drafter_gib(args),
                    drafter_config=_drafter_config(args))  # fmt: skip
    except (ModelConfigError, ValueError) as exc:
        log.warning("sparksim: no start-up prediction for this command (%s)", exc)
        return plan
    weights = (p.breakdown.get("weights_gib") or 0.0) * GIB
    kv = (p.available_kv_cache_gib or 0.0) * GIB
    tokens = p.kv_cache_tokens or 0
    blocks = p.breakdown.get("num_blocks") or tokens // max(p.block_size or 16, 1)
    return dataclasses.replace(plan, weights=weights, kv_available=kv, tokens=tokens,
                               blocks=blocks, prediction=p)  # fmt: skip


def _drafter_gib(args) -> float | None:
    """The size of a speculative drafter's own checkpoint in the cache, in GiB."""
    from sparksim.checkpoint import drafter_size

    size = drafter_size(_speculation(args))
    return size / GIB if size else None


def _drafter_config(args) -> dict | None:
    """A speculative drafter's config.json in the cache (a draft model's KV layers)."""
    from sparksim.checkpoint import drafter_config

    return drafter_config(_speculation(args))


def _speculation(args):
    from vllm_adapter import speculative

    try:
        return speculative.from_config(getattr(args, "speculative_config", None))
    except speculative.SpeculationError:
        return None


def _planner_plan(
    profile: Profile,
    args,
    arch: Architecture | None = None,
    host: HostSpec | None = None,
    others_bytes: float = 0.0,
) -> Plan:
    arch = arch or profile.architecture
    host = host or HostSpec()
    # Tensor parallel: each rank (each Spark of a pair) holds half the weights and half of
    # every sequence's KV cache and state (sparkdomain/pair.py).
    tp = max(getattr(args, "tensor_parallel_size", 1) or 1, 1)
    weights = (weight_bytes(arch) or 0.0) / tp
    total = host.cuda_visible_gib * GIB
    pool = args.gpu_memory_utilization * total
    graphs = 0.0 if args.enforce_eager else host.cuda_graphs_gb * GB
    context = host.cuda_context_gb * GB
    kv_available = pool - context - graphs - weights
    element = kv_element_bytes(arch, args.kv_cache_dtype)
    split = kv_bytes_per_token_split(arch, element) or (0.0, 0.0)
    per_token = max(sum(split) / tp, 1.0)
    per_seq = (kv_bytes_per_sequence(arch, element, args.max_model_len) or 0.0) / tp
    state = (arch.recurrent_state_mib or 0.0) * MIB / tp
    for_tokens = kv_available - args.max_num_seqs * state if state else kv_available
    tokens = max(int(for_tokens // per_token), 0)
    # What CUDA finds free when the worker starts: all but the OS, the CUDA context and
    # what the other servers on the host hold (on a GB10, MemAvailable).
    free_at_start = (
        host.physical_memory_gb - host.os_reserve_gb - host.cuda_context_gb
    ) * GB - max(others_bytes, 0.0)
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
    executor: RayExecutor | None = None,
    checkpoint=None,
    others: Callable[[], int] | None = None,
) -> Plan:
    """Start up as vLLM does (raises StartupFailed where vLLM would die); the plan. With a
    Ray executor (tensor parallel over a pair) the ranks are placed first and each holds
    its share of the memory on its own Spark. `others()`: what the other servers on the
    same host hold now (bytes), which vLLM's start gate finds in use (the ranks' hosts'
    with a Ray executor)."""
    startup = _Startup(args, profile, faults, memory, executor, checkpoint, others)
    return await startup.run(arch, host)


class _Startup:
    """The phases of one start-up, in vLLM's order; `pause` waits simulated seconds."""

    def __init__(
        self, args, profile: Profile, faults: Faults, memory: MemoryModel,
        executor: RayExecutor | None = None, checkpoint=None,
        others: Callable[[], int] | None = None,
    ):  # fmt: skip
        self.args, self.profile, self.faults = args, profile, faults
        self.checkpoint = checkpoint
        self.others = others
        self.memory = executor if executor is not None else memory
        self.executor = executor
        # What the model's workers log: in the API server's log as they are (one process),
        # or, over Ray, as Ray forwards them: "(RayWorkerProc pid=N) " before each line.
        self.wlog: logging.Logger | logging.LoggerAdapter = log
        self.scale = (args.load_time_scale or args.time_scale) / faults.slow_start_factor
        self.fmt = LogFormats(args.vllm_version)

    async def pause(self, sim_seconds: float) -> None:
        await asyncio.sleep(sim_seconds / self.scale)

    async def run(self, arch: Architecture | None, host: HostSpec | None) -> Plan:
        args = self.args
        self.announce()
        problem = backend_problem(args.tensor_parallel_size or 1,
                                  getattr(args, "distributed_executor_backend", None),
                                  args.vllm_version)  # fmt: skip
        if problem:
            raise StartupFailed(problem)
        if self.executor is not None:
            try:
                await self.executor.start()
            except ExecutorError as exc:
                raise StartupFailed(str(exc)) from None
            self.wlog = logging.LoggerAdapter(log, {"ray_prefix": self.executor.log_prefix()})
        held = self.held_by_others()
        self.plan = memory_plan(self.profile, args, arch, host, self.checkpoint, held)
        self.errors = VllmErrors(args.vllm_version)
        await self.pause(3.0)
        self.check_free_memory()
        await self.load_weights()
        if not args.enforce_eager:
            await self.compile()
        await self.pause(5.0)  # memory profiling run
        self.size_kv_cache()
        if not args.enforce_eager:
            await self.capture_graphs()
        self.finish()
        return self.plan

    def held_by_others(self) -> int:
        """What the other servers on this host (on the ranks' hosts: the fullest) hold as
        this one starts; sparksim says so, since vLLM's refusal names only the free."""
        if self.executor is not None:
            held = self.executor.others_bytes
        else:
            held = self.others() if self.others is not None else 0
        if held > 0:
            log.info("sparksim: other servers on this host hold %.2f GB at start-up", held / GB)
        return held

    def announce(self) -> None:
        """The server's version, its non-default args, the faults, the engine's config."""
        args, fmt = self.args, self.fmt
        name = args.served_model_name[0] if args.served_model_name else args.model
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
        for line in self.faults.describe():
            log.warning(line)
        log.info("Resolved architecture: %s", self.profile.architecture_name)
        log.info("Using max model len %s", args.max_model_len)
        # vLLM's SchedulerConfig (config/scheduler.py): chunked prefill is always on in V1.
        log.info("Chunked prefill is enabled with max_num_batched_tokens=%d.",
                 args.max_num_batched_tokens)  # fmt: skip
        config = (
            f"model={args.model!r}, max_seq_len={args.max_model_len}, "
            f"quantization={args.quantization}"
        )
        log.info(*fmt("engine_init", "Initializing a V1 LLM engine (v%s) with config: %s",
                      args.vllm_version, config))  # fmt: skip

    def check_free_memory(self) -> None:
        """(1) vLLM's request_memory, as the worker initialises its device: the pool it asks
        for (utilization × what CUDA reports) must be free before a weight is loaded."""
        plan = self.plan
        if plan.pool > plan.free_at_start:
            raise StartupFailed(
                self.errors.free_memory(
                    free=plan.free_at_start,
                    total=plan.total,
                    utilization=self.args.gpu_memory_utilization,
                )
            )

    async def load_weights(self) -> None:
        """The checkpoint's shards, at the profile's load speed."""
        args, plan, memory = self.args, self.plan, self.memory
        self.wlog.info("Starting to load model %s...", args.model)
        memory.set_footprint(int(plan.context))
        fast = 3.0 if getattr(args, "load_format", None) == "fastsafetensors" else 1.0
        load_seconds = plan.weights / GB / (self.profile.load_gbps * fast)
        shards = max(1, math.ceil(plan.weights / GB / SHARD_GB))
        per_shard = load_seconds / shards
        for k in range(1, shards + 1):
            await self.pause(per_shard)
            if plan.weights * k / shards > plan.free_at_start:
                self.weights_do_not_fit(loaded=plan.weights * (k - 1) / shards, shards=shards)
            memory.set_footprint(int(plan.context + plan.weights * k / shards))
            elapsed, remaining = per_shard * k, per_shard * (shards - k)
            self.wlog.info(
                "Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [%s<%s, %.2fs/it]",
                round(100 * k / shards),
                k,
                shards,
                _mmss(elapsed),
                _mmss(remaining),
                per_shard,
            )
            if self.faults.fail_start_phase == "load" and k * 2 >= shards:
                raise StartupFailed(fail_start_error("load"))
        self.wlog.info("Loading weights took %.2f seconds", load_seconds)
        self.wlog.info(
            *self.fmt(
                "model_took",
                "Model loading took %s GiB memory and %.6f seconds",
                f"{plan.weights / GIB:.4f}",
                load_seconds + 1.5,
            )
        )

    def weights_do_not_fit(self, *, loaded: float, shards: int) -> None:
        """(2) Weights do not fit in what is free: CUDA's out-of-memory error mid-load,
        which vLLM's load_model logs with its advice before re-raising it."""
        plan = self.plan
        oom = torch_oom(
            tried=plan.weights / shards,
            total=plan.total,
            free=plan.free_at_start - loaded,
            in_use=plan.context + loaded,
        )
        raise StartupFailed(f"torch.OutOfMemoryError: {oom}", before=[self.errors.load_oom(oom)])

    async def compile(self) -> None:
        compile_seconds, fmt = self.profile.compile_seconds, self.fmt
        await self.pause(compile_seconds * 0.3)
        self.wlog.info(*fmt("dynamo", "%sDynamo bytecode transform time: %.2f s", "",
                      compile_seconds * 0.3))  # fmt: skip
        await self.pause(compile_seconds * 0.7)
        self.wlog.info("Compiling a graph for dynamic shape takes %.2f s", compile_seconds * 0.7)
        self.wlog.info(*fmt("compile_total", "%storch.compile took %.2f s in total", "",
                      compile_seconds))  # fmt: skip

    def size_kv_cache(self) -> None:
        """After the profiling run: what is left of the pool for the KV cache, and whether
        one request at max_model_len (with the sequences' recurrent state) fits in it."""
        args, plan = self.args, self.plan
        if self.faults.fail_start_phase == "profile":
            raise StartupFailed(fail_start_error("profile"))
        if plan.prediction is not None:
            self._predicted_kv_cache(plan.prediction)
            return
        if plan.kv_available <= 0:
            # (3) Nothing of the pool is left for the KV cache after the profiling run.
            raise StartupFailed(self.errors.no_cache_memory())
        self.memory.set_footprint(int(plan.pool))
        self.wlog.info("Available KV cache memory: %.2f GiB", plan.kv_available / GIB)
        seq_tokens = max(plan.per_seq_max / plan.per_token, 1.0)
        self.wlog.info(
            *self.fmt(
                "kv_size",
                "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx",
                "GPU",
                f"{plan.tokens:,}",
                f"{args.max_model_len:,}",
                plan.tokens / seq_tokens,
            )
        )
        states = args.max_num_seqs * plan.state
        if (
            states
            and plan.per_seq_max + plan.state <= plan.kv_available < states + plan.per_seq_max
        ):
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
                self.errors.kv_too_small(
                    max_model_len=args.max_model_len,
                    needed=plan.per_seq_max + plan.state,
                    available=plan.kv_available,
                    estimated=max(estimated, 0),
                )
            )

    def _predicted_kv_cache(self, p) -> None:
        """The KV cache as vLLM's accounting for the command says (sparksim/checkpoint.py):
        its figures, or its refusal in its words."""
        args = self.args
        if p.available_kv_cache_gib is not None:
            self.wlog.info("Available KV cache memory: %.2f GiB", p.available_kv_cache_gib)
        if not p.starts:
            raise StartupFailed(f"ValueError: {p.error}")
        self.memory.set_footprint(int(self.plan.pool))
        self.wlog.info(
            *self.fmt(
                "kv_size",
                "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx",
                "GPU",
                f"{p.kv_cache_tokens:,}",
                f"{args.max_model_len:,}",
                p.max_concurrency,
            )
        )

    async def capture_graphs(self) -> None:
        profile = self.profile
        steps = 4
        for k in range(1, steps + 1):
            await self.pause(profile.graph_capture_seconds / steps)
            self.wlog.info(
                "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): %3d%%| %d/67",
                25 * k,
                round(67 * k / steps),
            )
            if self.faults.fail_start_phase == "graphs" and k == 2:
                raise StartupFailed(fail_start_error("graphs"))
        self.wlog.info(
            *self.fmt(
                "graph_done",
                "Graph capturing finished in %.0f secs, took %.2f GiB",
                profile.graph_capture_seconds,
                self.plan.graphs / GIB * 0.2,
            )
        )

    def finish(self) -> None:
        args, profile, fmt = self.args, self.profile, self.fmt
        init = 5.0 + (
            0 if args.enforce_eager else profile.graph_capture_seconds + profile.compile_seconds
        )
        compiled = 0 if args.enforce_eager else profile.compile_seconds
        log.info(*fmt("init_engine", "init engine (profile, create kv cache, warmup model) took "
                      "%.2f s (compilation: %.2f s)", init, compiled))  # fmt: skip
        log.info(*fmt("server_start", "Starting vLLM server on %s",
                      f"http://{args.host}:{args.port}"))  # fmt: skip


def _mmss(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60:02d}:{seconds % 60:02d}"

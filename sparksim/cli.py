"""`python -m sparksim serve <model> [flags]`: start-up, then serve until stopped.

Takes the same argument vector as `vllm serve` (the panel builds one vector for both), plus
the simulator's own flags. Start-up prints vLLM's log lines in vLLM's order with durations
from the model's profile, runs the same memory checks a Spark would fail, and only then
answers /v1/models.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

from sparksim import registry
from sparksim.arguments import (
    SIM_DEFAULTS,
    SIM_FLAGS,
    VLLM_DEFAULT_UTILIZATION,
    VllmArgsError,
    build_parser,
    split_sim_flags,
    vllm_args,
)
from sparksim.faults import FaultSpecError, parse_faults
from sparksim.serving import serve
from sparksim.startup import SHARD_GB, LogFormats, Plan, StartupFailed, memory_plan, startup

# The argument parser (sparksim/arguments.py), the start-up sequence (sparksim/startup.py)
# and serving (sparksim/serving.py) live in their own modules; importable from here too.
__all__ = [
    "SHARD_GB",
    "SIM_DEFAULTS",
    "SIM_FLAGS",
    "VLLM_DEFAULT_UTILIZATION",
    "LogFormats",
    "Plan",
    "StartupFailed",
    "VllmArgsError",
    "VllmFormatter",
    "build_parser",
    "main",
    "memory_plan",
    "serve",
    "split_sim_flags",
    "startup",
    "vllm_args",
]


class VllmFormatter(logging.Formatter):
    """`INFO 11-29 08:50:01 [loader.py:123] message`, the shape vLLM prints; every line of
    a multi-line message carries the prefix, as vLLM's NewLineFormatter does."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(record.created))
        prefix = f"{record.levelname} {stamp} [{record.filename}:{record.lineno}] "
        # A worker's line forwarded by Ray (tensor parallel): Ray's "(RayWorkerProc pid=N) ".
        prefix = getattr(record, "ray_prefix", "") + prefix
        return "\n".join(prefix + line for line in record.getMessage().split("\n"))


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
        args.vllm_argv = ["vllm", "serve", *rest]  # the command as vLLM would get it
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

"""The command line of `python -m sparksim`: the simulator's own flags (argparse), and the
`vllm serve` part of the vector parsed as the imitated vLLM's own parser does (its contract)."""

from __future__ import annotations

import argparse

from sparksim import registry
from sparksim.corpus import ANSWER_STYLES
from sparksim.faults import FAULT_HELP
from sparksim.profiles import BUILTIN
from vllm_adapter import contract as vllm_contract
from vllm_adapter import speculative

# `python -m sparksim --help`'s description (the first line of sparksim/cli.py's docstring).
DESCRIPTION = "`python -m sparksim serve <model> [flags]`: start-up, then serve until stopped."
VLLM_DEFAULT_UTILIZATION = 0.92
SIM_FLAGS = ("--profile", "--time-scale", "--load-time-scale", "--jit-seconds", "--fault",
             "--meminfo-file", "--log-level", "--vllm-version", "--answers")  # fmt: skip
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
    try:  # vLLM builds its SpeculativeConfig with the engine config and refuses a bad one
        speculative.from_config(merged.get("speculative_config"))
    except speculative.SpeculationError as exc:
        raise VllmArgsError(1, [f"ValueError: {exc}"]) from None
    merged["model"] = merged.pop("model_tag")
    merged["vllm_version"] = contract.version
    return argparse.Namespace(**merged)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sparksim", description=DESCRIPTION)
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
    s.add_argument(
        "--answers",
        choices=ANSWER_STYLES,
        default="prose",
        help="what the model answers with: plain English prose, or (a demo mode) Markdown "
        "blocks with headings, lists, tables, code and math (default: prose)",
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

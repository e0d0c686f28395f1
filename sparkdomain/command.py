"""The exact `vllm serve` argument vector of a recipe, and the last line of defence.

Pure Python, no Django: the recipe page shows these, and both engines (Docker and the
local process engine) receive the same vector. `assert_safe_argv` refuses any vector whose
--gpu-memory-utilization is missing (vLLM would fall back to its 0.92 default) or above
0.90, that carries an option no recipe field, extra-argument allowlist or panel setting
puts there, or whose model, tokenizer or folder is neither a Hugging Face id nor a path in
the host's model directories — whatever path built it.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable
from decimal import Decimal
from typing import Protocol

from sparkdomain import spark
from sparkdomain.flags import EXTRA_FLAGS, TYPED_FLAGS, FlagError, check_utilization
from sparkdomain.model_refs import model_ref_problem
from sparkdomain.pair import RAY_BACKEND_FLAG, tensor_parallel_problem
from vllm_adapter import contract as vllm_contract

# The options a vector may carry: the recipe's typed fields, the extra arguments' allowlist
# and what the panel adds itself (address, port, revision, a pair's Ray backend). Anything
# else — a chat template file, a tool-parser plugin, a download directory, a speculative
# model, a worker class, middleware — would let vLLM read a file or import code nobody
# checked (issue 38), so the last guard refuses it by what vLLM reads it as (its dest).
PASSED_FLAGS = frozenset({*TYPED_FLAGS, *EXTRA_FLAGS, RAY_BACKEND_FLAG}) - {"--api-key"}
# Values vLLM reads as a model, a tokenizer or a folder: a Hub id or a path inside the
# host's model directories (sparkdomain/model_refs.py); some also take a fixed word.
PATH_DESTS = frozenset({"model", "tokenizer", "generation_config"})
WORD_VALUES = {
    "generation_config": frozenset({"auto", "vllm"}),
    # Never a class name (vLLM imports one given by its qualified name).
    "distributed_executor_backend": frozenset({"ray", "mp", "uni"}),
}
_NEGATIVE_NUMBER = re.compile(r"-\d")


class RecipeLike(Protocol):
    model_id: str
    served_model_name: str
    image: str
    gpu_memory_utilization: Decimal
    max_model_len: int
    max_num_seqs: int
    kv_cache_dtype: str
    quantization: str
    enable_prefix_caching: bool
    enforce_eager: bool
    max_num_batched_tokens: int | None
    tensor_parallel_size: int
    reasoning_parser: str
    tool_call_parser: str
    extra_args: list[str]


class UnsafeCommand(ValueError):
    """The argument vector breaks a Spark safety rule; nothing may be started with it."""


def serve_argv(
    recipe: RecipeLike,
    *,
    host: str | None = None,
    port: int | None = None,
    model_dirs: Iterable[str] | None = None,
) -> list[str]:
    """`vllm serve <model> <flags>` for a recipe; host and port are the engine's to add.
    `model_dirs`: the host's model directories (apps/recipes/launch.py::argv_on); None when
    no host is named (the recipe page), and a path is then judged by its shape only."""
    argv = ["vllm", "serve", recipe.model_id]
    revision = getattr(recipe, "revision", "")  # a run pins the commit it downloaded
    if revision:
        argv += ["--revision", revision]
    if recipe.served_model_name:
        argv += ["--served-model-name", recipe.served_model_name]
    if host is not None:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    # Always explicit: vLLM's own default (0.92) would break the Spark rule.
    argv += ["--gpu-memory-utilization", f"{Decimal(str(recipe.gpu_memory_utilization)):.2f}"]
    argv += ["--max-model-len", str(recipe.max_model_len)]
    argv += ["--max-num-seqs", str(recipe.max_num_seqs)]
    argv += ["--kv-cache-dtype", recipe.kv_cache_dtype]
    if recipe.quantization:
        argv += ["--quantization", recipe.quantization]
    argv.append(
        "--enable-prefix-caching" if recipe.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    if recipe.enforce_eager:
        argv.append("--enforce-eager")
    if recipe.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(recipe.max_num_batched_tokens)]
    if recipe.tensor_parallel_size and recipe.tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(recipe.tensor_parallel_size)]
    if recipe.reasoning_parser:
        argv += ["--reasoning-parser", recipe.reasoning_parser]
    if recipe.tool_call_parser:
        argv += ["--tool-call-parser", recipe.tool_call_parser]
    argv += list(recipe.extra_args or [])
    assert_safe_argv(argv, model_dirs=model_dirs)
    return argv


def docker_run_argv(
    recipe: RecipeLike,
    *,
    port: int = spark.DEFAULT_PORT,
    hf_cache: str = "$HOME/.cache/huggingface",
) -> list[str]:
    """The equivalent `docker run` for copy-paste (NVIDIA's playbook shape: all GPUs, the
    Hugging Face cache mounted so weights download once)."""
    return [
        "docker", "run", "--rm", "--gpus", "all",
        "-p", f"{port}:{port}",
        "-v", f"{hf_cache}:/root/.cache/huggingface",
        recipe.image,
        # Inside the container vLLM listens on all its interfaces; -p publishes the port.
        *serve_argv(recipe, host="0.0.0.0", port=port),  # noqa: S104
    ]  # fmt: skip


def shell_line(argv: list[str]) -> str:
    """One copy-pasteable line; $HOME stays expandable, everything else is quoted."""
    return " ".join(a if a.startswith("$HOME/") and ":" in a else shlex.quote(a) for a in argv)


def assert_safe_argv(argv: list[str], *, model_dirs: Iterable[str] | None = None) -> None:
    """Refuse a `vllm serve` vector that could freeze a Spark or smuggle in options.
    `model_dirs`: where a local model, tokenizer or folder may lie on the host that runs it
    (each engine passes its own; none set there means Hub ids only). None: the host is not
    known yet, and a path is judged by its shape only."""
    # The Docker engine runs argv[0] as the container's entrypoint: it must be vllm.
    if len(argv) < 3 or argv[0] != "vllm" or argv[1] != "serve":
        raise UnsafeCommand("expected 'vllm serve <model> ...'")
    if any(not isinstance(a, str) for a in argv):
        raise UnsafeCommand("every argument must be a string")
    flags = argv[3:]
    name = "--gpu-memory-utilization"
    # Every spelling every known vLLM maps to the same option: its aliases
    # (--device-memory-utilization), underscores (--gpu_memory_utilization) and, where
    # argparse allows them, abbreviations (--gpu-memory-util).
    contracts = [vllm_contract.load(v) for v in vllm_contract.available_versions()]
    values = []
    for i, arg in enumerate(flags):
        if not arg.startswith("--"):
            continue
        flag, eq, inline = arg.partition("=")
        flag = vllm_contract.Contract.normalise(flag)
        resolved = {(c.resolve(flag)[1], c.dest_of(flag)) for c in contracts}
        dests = {dest for _, dest in resolved}
        if "config" in dests or flag == "--config":
            raise UnsafeCommand("--config would read flags from a file nobody checked")
        if "api_key" in dests or flag == "--api-key":
            raise UnsafeCommand(
                "--api-key would put a secret in the command line: the panel gives each "
                "run its own key through the environment"
            )
        if "gpu_memory_utilization" in dests or flag == name:
            if any(how == "abbreviation" for how, _ in resolved) and flag != name:
                raise UnsafeCommand(f"{arg} abbreviates {name}: spell it out")
            values.append(inline if eq else (flags[i + 1] if i + 1 < len(flags) else ""))
        elif name.startswith(flag) and len(flag) > 2:
            raise UnsafeCommand(f"{arg} abbreviates {name}: spell it out")
    if not values:
        raise UnsafeCommand(
            f"{name} is missing: vLLM would use its default 0.92. {spark.UTILIZATION_RULE}"
        )
    if len(values) > 1:
        raise UnsafeCommand(f"{name} is given {len(values)} times")
    try:
        check_utilization(values[0])
    except FlagError as exc:
        raise UnsafeCommand(str(exc)) from None
    if argv[2].startswith("-"):
        raise UnsafeCommand("the model must come right after 'serve'")
    _check_options(flags, contracts, None if model_dirs is None else tuple(model_dirs))
    problem = model_ref_problem(
        argv[2], field="the model", model_dirs=None if model_dirs is None else tuple(model_dirs)
    )
    if problem:
        raise UnsafeCommand(problem)


@functools.cache
def _passed_dests() -> frozenset[str]:
    """What vLLM reads PASSED_FLAGS as, in every version SparkPanel knows."""
    dests = set()
    for version in vllm_contract.available_versions():
        contract = vllm_contract.load(version)
        for flag in PASSED_FLAGS:
            option = contract.option(flag)
            if option is not None:
                dests.add(option.dest)
    return frozenset(dests)


def _check_options(flags: list[str], contracts: list, model_dirs: tuple[str, ...] | None) -> None:
    """Every option is one SparkPanel passes (by what every known vLLM reads it as), and
    every path-like value is a Hub id or lies in the host's model directories."""
    for i, arg in enumerate(flags):
        if not arg.startswith("-") or arg == "-" or _NEGATIVE_NUMBER.match(arg):
            continue
        flag, eq, inline = arg.partition("=")
        if not arg.startswith("--"):  # a short option: only the typed fields' -q and -tp
            if flag not in PASSED_FLAGS:
                raise UnsafeCommand(f"{arg} is not an option SparkPanel passes to vLLM")
            continue
        flag = vllm_contract.Contract.normalise(flag)
        dests = {c.dest_of(flag) for c in contracts} - {None}
        if dests - _passed_dests() or (not dests and flag not in PASSED_FLAGS):
            raise UnsafeCommand(
                f"{arg} is not an option SparkPanel passes to vLLM: a recipe sets its typed "
                "fields and the extra arguments' allowlist; options that read files or load "
                "code never reach a server"
            )
        value = inline if eq else (flags[i + 1] if i + 1 < len(flags) else "")
        for dest in dests:
            words = WORD_VALUES.get(dest)
            if words is not None and value in words:
                continue
            if dest in PATH_DESTS:
                problem = model_ref_problem(value, field=flag, model_dirs=model_dirs)
                if problem:
                    raise UnsafeCommand(problem)
            elif words is not None:
                raise UnsafeCommand(f"{flag} takes one of {', '.join(sorted(words))}")


# The recipe field that sets each typed flag; anything else came from the extra arguments.
FIELD_OF_FLAG: dict[str, str] = {
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--quantization": "quantization",
    "--enable-prefix-caching": "enable_prefix_caching",
    "--no-enable-prefix-caching": "enable_prefix_caching",
    "--enforce-eager": "enforce_eager",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--reasoning-parser": "reasoning_parser",
    "--tool-call-parser": "tool_call_parser",
    "--served-model-name": "served_model_name",
    "--revision": "revision",
}


def contract_problems(recipe: RecipeLike, version: str | None = None) -> list[tuple[str, str]]:
    """(field, message) for everything the given vLLM version would refuse in the recipe's
    vector — in vLLM's own words, with advice. [] when that vLLM accepts it."""
    try:
        contract = vllm_contract.load(version)
    except KeyError as exc:
        return [("image", str(exc.args[0]))]
    try:
        argv = serve_argv(recipe)
    except UnsafeCommand as exc:
        return [("__all__", str(exc))]
    out = []
    for problem in contract.check(argv):
        field = FIELD_OF_FLAG.get(problem.flag, "extra_args" if problem.flag else "__all__")
        out.append((field, f"vLLM {contract.version}: {problem}"))
    problem = tensor_parallel_problem(recipe.tensor_parallel_size or 1)
    if problem:
        out.append(("tensor_parallel_size", problem))
    return out

"""The exact `vllm serve` argument vector of a recipe, and the last line of defence.

Pure Python, no Django: the recipe page shows these, and both engines (Docker and the
local process engine) receive the same vector. `assert_safe_argv` refuses any vector whose
--gpu-memory-utilization is missing (vLLM would fall back to its 0.92 default) or above
0.90, that carries an option the rules of `sparkdomain/option_rules.py` deny (the panel's
own, code and files from outside the image, memory outside the utilization), a value the
contract would refuse, or a model, tokenizer or folder that is neither a Hugging Face id
nor a path in the host's model directories — whatever path built it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from decimal import Decimal
from typing import Protocol

from sparkdomain import option_rules, options, spark
from sparkdomain.flags import FlagError, check_utilization
from sparkdomain.model_refs import model_ref_problem
from sparkdomain.pair import tensor_parallel_problem
from vllm_adapter import contract as vllm_contract

# Values vLLM reads as a model, a tokenizer or a folder: a Hub id or a path inside the
# host's model directories (sparkdomain/model_refs.py); the class PATH of option_rules.
PATH_DESTS = option_rules.PATH_DESTS
_NEGATIVE_NUMBER = re.compile(r"-\d")


class RecipeLike(Protocol):
    model_id: str
    served_model_name: str
    image: str
    gpu_memory_utilization: Decimal
    max_model_len: int | None
    max_num_seqs: int | None
    kv_cache_dtype: str
    quantization: str
    enable_prefix_caching: bool | None
    enforce_eager: bool
    max_num_batched_tokens: int | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
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
    if recipe.served_model_name:  # one name or several (vLLM: nargs="+")
        argv += ["--served-model-name", *recipe.served_model_name.split()]
    if host is not None:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    # Always explicit: vLLM's own default (0.92) would break the Spark rule.
    argv += ["--gpu-memory-utilization", utilization_text(recipe.gpu_memory_utilization)]
    # Blank: vLLM's own (the model's context; its default number of sequences).
    if recipe.max_model_len == -1:
        argv += ["--max-model-len", "auto"]
    elif recipe.max_model_len:
        argv += ["--max-model-len", str(recipe.max_model_len)]
    if recipe.max_num_seqs:
        argv += ["--max-num-seqs", str(recipe.max_num_seqs)]
    argv += ["--kv-cache-dtype", recipe.kv_cache_dtype]
    if recipe.quantization:
        argv += ["--quantization", recipe.quantization]
    if recipe.enable_prefix_caching is not None:  # None: vLLM's own choice
        argv.append(
            "--enable-prefix-caching"
            if recipe.enable_prefix_caching
            else "--no-enable-prefix-caching"
        )
    if recipe.enforce_eager:
        argv.append("--enforce-eager")
    if recipe.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(recipe.max_num_batched_tokens)]
    if recipe.tensor_parallel_size and recipe.tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(recipe.tensor_parallel_size)]
    pipeline = getattr(recipe, "pipeline_parallel_size", 1)
    if pipeline and pipeline > 1:
        argv += ["--pipeline-parallel-size", str(pipeline)]
    if recipe.reasoning_parser:
        argv += ["--reasoning-parser", recipe.reasoning_parser]
    if recipe.tool_call_parser:
        # vLLM uses a tool-call parser only with auto tool choice on (without it a chat
        # request carrying `tools` gets a 400); extra arguments that set it decide instead.
        if not sets_auto_tool_choice(recipe.extra_args or []):
            argv.append(AUTO_TOOL_CHOICE)
        argv += ["--tool-call-parser", recipe.tool_call_parser]
    argv += list(recipe.extra_args or [])
    assert_safe_argv(argv, model_dirs=model_dirs)
    return argv


AUTO_TOOL_CHOICE = "--enable-auto-tool-choice"
_PARSER_FIELDS = {
    "--tool-call-parser": "tool_call_parser",
    "--reasoning-parser": "reasoning_parser",
}


def _auto_tool_choice(flag: str):
    """vLLM's auto-tool-choice switch when a spelling names it exactly in a known vLLM."""
    for contract in options.contracts():
        option = contract.option(flag)
        if option is not None:
            return option if option.dest == "enable_auto_tool_choice" else None
    return None


def sets_auto_tool_choice(tokens: Iterable[str]) -> bool:
    """Whether options (a recipe's extra arguments) turn vLLM's auto tool choice on or off
    themselves, in any spelling a known vLLM has (`--enable-auto-tool-choice`,
    `--disable-auto-tool-choice`, `--no-enable-auto-tool-choice`, underscores)."""
    return any(_auto_tool_choice(flag) for flag, _ in options.given(list(tokens)))


def tool_calling(argv: list[str]) -> dict:
    """What a `vllm serve` vector tells vLLM about tool calls and reasoning: the tool-call
    parser, whether auto tool choice is on (the last spelling wins, as in vLLM's parser),
    `served` — vLLM picks a tool parser only with both (`ParserManager.get_tool_parser`);
    without one it answers a chat request carrying `tools` with HTTP 400 — and the
    reasoning parser ("" for none)."""
    out: dict = {"tool_call_parser": "", "auto_tool_choice": False, "reasoning_parser": ""}
    for flag, value in options.given(argv[3:]):
        spelled = vllm_contract.Contract.normalise(flag)
        if spelled in _PARSER_FIELDS:
            none = spelled == "--reasoning-parser" and value == "none"  # vLLM: unset
            out[_PARSER_FIELDS[spelled]] = "" if none else value
        elif (switch := _auto_tool_choice(flag)) is not None:
            out["auto_tool_choice"] = not switch.negative(spelled)
    out["served"] = bool(out["tool_call_parser"] and out["auto_tool_choice"])
    return out


def utilization_text(value) -> str:
    """The utilization as the command spells it: two decimals (0.85), three where the recipe
    has them (0.825)."""
    number = Decimal(str(value))
    two = number.quantize(Decimal("0.01"))
    return f"{two}" if two == number else f"{number.quantize(Decimal('0.001'))}"


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


def _shell_word(arg: str) -> str:
    return arg if arg.startswith("$HOME/") and ":" in arg else shlex.quote(arg)


def shell_line(argv: list[str]) -> str:
    """One copy-pasteable line; $HOME stays expandable, everything else is quoted."""
    return " ".join(_shell_word(a) for a in argv)


def _is_option(arg: str) -> bool:
    return len(arg) > 1 and arg.startswith("-") and not arg[1].isdigit()


def shell_lines(argv: list[str]) -> str:
    """The same command, copy-pasteable, one option per line (`\\` continuations): a page
    shows it without ever breaking a line inside a flag. An option keeps its one value on
    its line; the words after that (a container's image and its command) start their own."""
    lines: list[list[str]] = []
    taken = True  # whether the current line's option already has its value
    for arg in argv:
        word = _shell_word(arg)
        if _is_option(arg):
            lines.append([word])
            taken = False
        elif lines and _is_option(lines[-1][0]) and not taken:
            lines[-1].append(word)
            taken = True
        elif lines and not _is_option(lines[-1][0]):
            lines[-1].append(word)
        else:
            lines.append([word])
    return " \\\n  ".join(" ".join(line) for line in lines)


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
    contracts = options.contracts()
    values = []
    for i, arg in enumerate(flags):
        if not arg.startswith("-") or arg == "-" or _NEGATIVE_NUMBER.match(arg):
            continue
        flag, eq, inline = arg.partition("=")
        flag = vllm_contract.Contract.normalise(flag)
        resolved = {(c.resolve(flag)[1], c.dest_of(flag)) for c in contracts}
        dests = {dest for _, dest in resolved}
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
    _check_options(flags, None if model_dirs is None else tuple(model_dirs))
    problem = model_ref_problem(
        argv[2], field="the model", model_dirs=None if model_dirs is None else tuple(model_dirs)
    )
    if problem:
        raise UnsafeCommand(problem)


def _check_options(flags: list[str], model_dirs: tuple[str, ...] | None) -> None:
    """Every option is one the rules allow (sparkdomain/option_rules.py: FIELD, PATH, DATA,
    or PANEL the panel sets itself) as every known vLLM reads it, with each of its values
    one that vLLM's parser takes and the rules allow; nothing else is left over
    (`sparkdomain/options.py`, the reader the recipe's front door shares)."""
    for read in options.read_options(flags, model_dirs=model_dirs, panel_sets=True):
        if read.problem:
            raise UnsafeCommand(read.problem)


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
    "--pipeline-parallel-size": "pipeline_parallel_size",
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
    problem = tensor_parallel_problem(
        recipe.tensor_parallel_size or 1, getattr(recipe, "pipeline_parallel_size", 1) or 1
    )
    if problem:
        out.append(("tensor_parallel_size", problem))
    return out

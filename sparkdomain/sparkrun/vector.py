"""The `vllm serve` vector a recipe runs, read onto SparkPanel's recipe: the typed fields
from the options they stand for, every other option vLLM accepts as data (the recipe's
extra arguments, judged by `sparkdomain/options.py` as at the front door), the options the
panel sets for each run dropped, and the rest refused with its reason.

The vector is what sparkrun would pass to vLLM (`render`ed from the command, or built from
the defaults by `structured`), so the import keeps what sparkrun runs — not a guess from
the defaults, which a command may not even use."""

from __future__ import annotations

import re
import shlex
from decimal import Decimal, InvalidOperation

from sparkdomain import option_rules, options
from sparkdomain.bounded import clip
from sparkdomain.pair import tensor_parallel_problem
from sparkdomain.sparkrun.recipe import SparkrunRecipe
from vllm_adapter import advice
from vllm_adapter import contract as vllm_contract

_OPS = {";", "&&", "||", "|", "&"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# sparkrun's container keeps the Hugging Face cache here; a snapshot path names the model
# and the commit it serves (`models--org--name/snapshots/<commit>`).
_SNAPSHOT = re.compile(r"/models--([^/]+?)--([^/]+)/snapshots/([0-9a-f]{40})/?$")
# What vLLM reads each typed field as → the field (option_rules.FIELD_DESTS), and how.
_WHOLE = {"max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size",
          "pipeline_parallel_size"}  # fmt: skip
_SWITCH = {"enable_prefix_caching", "enforce_eager"}


def split_command(rendered: str) -> tuple[list[str] | None, list[str]]:
    """(the `vllm serve ...` vector inside a rendered command, the other shell steps).
    None when no step starts vLLM. Environment assignments and `exec` in front of `vllm`
    are part of its step (the shell passes the rest to vllm)."""
    # A backslash at a line's end continues it (what bash does before it splits words).
    text = re.sub(r"\\[ \t]*\r?\n", " ", rendered).replace("\r\n", "\n")
    lexer = shlex.shlex(text.replace("\n", " ; "), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise ValueError(f"the command cannot be split into arguments ({exc})") from None
    steps: list[list[str]] = [[]]
    for token in tokens:
        if token in _OPS or set(token) <= set(";&|"):
            steps.append([])
        else:
            steps[-1].append(token)
    serve: list[str] | None = None
    others: list[str] = []
    for step in (s for s in steps if s):
        words = list(step)
        while words and (_ASSIGNMENT.match(words[0]) or words[0] == "exec"):
            words = words[1:]
        if serve is None and len(words) >= 2 and words[0].rsplit("/", 1)[-1] == "vllm" \
                and words[1] == "serve":  # fmt: skip
            serve = ["vllm", *words[1:]]
        else:
            others.append(shlex.join(step))
    return serve, others


def _model_of(positional: str, model: str, recipe: SparkrunRecipe) -> None:
    """The vector's model against the recipe's `model:` (the panel downloads that one)."""
    if positional in ("", model):
        return
    found = _SNAPSHOT.search(positional)
    if found and f"{found.group(1)}/{found.group(2)}" == model:
        if "revision" not in recipe.fields:
            recipe.fields["revision"] = found.group(3)
        recipe.ignored.append(
            f"command: serves {clip(positional, 120)} (sparkrun's cache copy of {model}); "
            f"SparkPanel downloads {model} at commit {found.group(3)[:12]} and serves that."
        )
        return
    if "{" in positional:
        return  # an unfilled placeholder; reported with the others
    recipe.ignored.append(
        f"command: serves {clip(positional, 120)}; SparkPanel serves the recipe's model "
        f"{model} (a different path in the command is sparkrun's own copy)."
    )


def read_vector(argv: list[str], model: str, recipe: SparkrunRecipe, where: str) -> None:
    """Put the options of `vllm serve <model> ...` onto the recipe (`where`: the key path
    problems are reported under)."""
    positional = argv[2] if len(argv) > 2 and not options.is_option(argv[2]) else ""
    flags = argv[3:] if positional else argv[2:]
    _model_of(positional, model, recipe)
    unfilled = sorted({m for a in argv for m in re.findall(r"\{(\w+)\}", a)})
    if unfilled:
        recipe._error(
            where,
            "placeholders without a value in defaults: "
            + ", ".join("{" + clip(n, 40) + "}" for n in unfilled[:10])
            + " (sparkrun would pass them to vLLM as they are)",
        )
        return
    newest = vllm_contract.load()
    extra: list[str] = []
    # `--enable-auto-tool-choice` beside `--tool-call-parser`: the parser field adds it
    # (sparkdomain/command.py), so it is not kept twice; (where in extra, its tokens).
    auto_tools: list[tuple[int, list[str]]] = []
    parser_given = False
    parallel = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1}
    for read in options.read_options(flags, model_dirs=None, panel_sets=True):
        dest = read.dest
        values = read.tokens[1:]  # [option, *values]; a switch or a JSON key: none
        parser_given = parser_given or (dest == "tool_call_parser" and not read.problem)
        if dest == "enable_auto_tool_choice" and not read.problem \
                and not read.options[-1].negative(read.spelled):  # fmt: skip
            auto_tools.append((len(extra), read.tokens))
            continue
        if read.problem and not read.options:
            gone = advice.REMOVED.get(read.spelled)
            if gone:
                recipe.ignored.append(f"{where}: {read.spelled} not carried over — {gone}")
                continue
            recipe._error(where, _vllm_words(read, newest))
            continue
        if dest in option_rules.PANEL_SETS:  # the address, the port, the executor
            if dest == "distributed_executor_backend":
                recipe.ignored.append(
                    f"{where}: {shlex.join(read.tokens)} — SparkPanel sets the executor of each "
                    "run itself (Ray on a pair of Sparks)."
                )
            continue
        if dest == "data_parallel_size" and values:
            parallel[dest] = _whole(values[0]) or 1
            if parallel[dest] == 1:
                recipe.ignored.append(f"{where}: {shlex.join(read.tokens)} is vLLM's default.")
            continue
        if read.problem and _is_default(read, values):
            # The panel's own option (placement, …) at vLLM's own value: nothing to carry.
            recipe.ignored.append(f"{where}: {shlex.join(read.tokens)} is vLLM's default.")
            continue
        if read.problem:
            recipe._error(where, read.problem)
            continue
        rule = read.rule
        if rule is not None and rule.kind is option_rules.Kind.FIELD:
            _field(read, values, recipe, where)
            if dest in parallel and dest in recipe.fields:
                parallel[dest] = int(recipe.fields[dest])  # type: ignore[arg-type]
            continue
        extra += read.tokens
    if not parser_given:  # no tool-call parser to add it: the option stays where it was
        for at, tokens in reversed(auto_tools):
            extra[at:at] = tokens
    if extra:
        recipe.fields["extra_args"] = [*recipe.fields.get("extra_args", []), *extra]  # type: ignore[misc]
    world = parallel["tensor_parallel_size"] * parallel["pipeline_parallel_size"] * parallel[
        "data_parallel_size"]  # fmt: skip
    if parallel["data_parallel_size"] > 1 or world > 2:
        problem = tensor_parallel_problem(
            parallel["tensor_parallel_size"], parallel["pipeline_parallel_size"],
            parallel["data_parallel_size"],
        ) or (
            "--data-parallel-size 2 runs two copies of the model, one per Spark: SparkPanel "
            "serves a model on one Spark or splits it over a pair (tensor or pipeline parallel "
            "2); start the recipe on two Sparks instead"
        )  # fmt: skip
        recipe._error("parallelism", problem)


def _is_default(read: options.Read, values: list[str]) -> bool:
    """A value-taking PANEL option given exactly its default in every known vLLM."""
    if read.rule is None or read.rule.kind is not option_rules.Kind.PANEL or len(values) != 1:
        return False
    return all(
        o.takes_value and o.default is not None and str(o.default) == values[0]
        for o in read.options
    )


def _vllm_words(read: options.Read, newest) -> str:
    """An option no known vLLM has, in the newest vLLM's own words."""
    if "abbreviates" in (read.problem or ""):
        return read.problem or ""
    return f"vllm: error: unrecognized arguments: {read.spelled} — " + advice.for_flag(
        read.spelled, newest.version
    )


def _whole(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _field(read: options.Read, values: list[str], recipe: SparkrunRecipe, where: str) -> None:
    field = option_rules.FIELD_DESTS[read.dest]
    before = recipe.fields.get(field)
    if field in _SWITCH:
        value: object = not read.options[-1].negative(read.spelled)
    elif field == "served_model_name":
        value = " ".join(values)  # every name, in order (the first is the one listed)
    elif field == "gpu_memory_utilization":
        try:
            Decimal(values[0])
        except InvalidOperation:
            recipe._error(where, f"--gpu-memory-utilization: {values[0]!r} is not a number")
            return
        value = values[0]
    elif field == "max_model_len":
        text = values[0].strip().lower()
        value = -1 if text in ("auto", "-1") else vllm_contract._human_int(values[0])
    elif field in _WHOLE:
        value = int(values[0])
    else:  # text: the KV dtype, quantization, the parsers, the revision
        value = values[0]
    if before is not None and before != value and field != "revision":
        recipe.ignored.append(
            f"{field}: the command passes {clip(shlex.join(read.tokens), 80)}, which wins over "
            f"{before} because it is what sparkrun runs."
        )
    recipe.fields[field] = value

"""parse_sparkrun(): one sparkrun recipe (YAML, already parsed) onto SparkPanel recipe
fields, every problem collected at once; looks_like_sparkrun() tells it from SparkPanel's
own YAML. Refuses recipes for another engine than vLLM.

What the recipe runs is what sparkrun 0.4 would pass to vLLM: its `command:` rendered with
the defaults (sparkdomain/sparkrun/placeholders.py), or — without a command — the command
sparkrun builds from the defaults (structured.py). That vector is read option by option
(vector.py): typed fields, any other option vLLM accepts as data, the panel's own options
dropped, the denylist refused with its reason. Every other key is understood, kept or
noted — never fatal (sparkrun itself only suggests on unknown keys): metadata and
`maintainer` are kept as provenance, `mods`, `patches` and commands around vLLM are kept as
the code they are (a start refuses them unless the host allows them), `volumes` and
`executor_config` never become mounts or privileges, `overrides:` are applied as on a
Spark, and a community `variants:` block gives one recipe per variant. docs/recipes.md has
the key-by-key mapping.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from sparkdomain.bounded import clip
from sparkdomain.sparkrun.overrides import apply_overrides
from sparkdomain.sparkrun.placeholders import PlaceholderError, render
from sparkdomain.sparkrun.recipe import SparkrunImportError, SparkrunRecipe
from sparkdomain.sparkrun.sections import (
    kept,
    read_env,
    read_metadata,
    recipe_description,
    recipe_name,
    section_mapping,
)
from sparkdomain.sparkrun.structured import (
    CONSUMED_KEYS,
    FLAG_OF_KEY,
    structured_argv,
    unmapped_keys,
)
from sparkdomain.sparkrun.values import read_text, shown_value
from sparkdomain.sparkrun.vector import read_vector, split_command

# sparkrun's runtimes that start vLLM (the last three are its multi-node and
# custom-build flavours); sglang, llama-cpp and trtllm are other engines.
VLLM_RUNTIMES = frozenset({"vllm", "vllm-distributed", "vllm-ray", "eugr-vllm"})
# How sparkrun itself guesses the runtime from a command when none is given.
_OTHER_ENGINE_COMMANDS = (
    (re.compile(r"^(?:sglang\s+serve|python3?\s+-m\s+sglang\.launch_server)\b"), "sglang"),
    (re.compile(r"^llama-server\b"), "llama-cpp"),
    (re.compile(r"^(?:trtllm-serve|mpirun\b.*trtllm)"), "trtllm"),
)
# sparkrun's platform default on a GB10 fills the gap when a recipe gives none
# (sparkrun/platforms/dgx_spark.py::default_runtime_flags).
GB10_DEFAULT_UTILIZATION = "0.8"

# Keys read onto the recipe.
TOP_LEVEL_MAPPED = (
    "model", "model_revision", "container", "runtime", "name", "description", "defaults",
    "metadata", "command", "env", "mods", "patches", "pre_exec", "post_exec", "post_commands",
    "overrides", "variants", "maintainer", "draft_model", "volumes", "executor_config",
)  # fmt: skip
_TOPOLOGY = "SparkPanel places a run by its parallelism (one Spark, or a pair for 2)."
_BUILD = "SparkPanel runs the container image as it is; a build is an admin's to make."
# Keys understood and deliberately not used, each with its sentence (noted on import).
TOP_LEVEL_IGNORED: dict[str, str] = {
    "sparkrun_version": "",
    "recipe_version": "",
    "min_sparkrun_version": "",
    "runtime_version": "sparkrun's runtime version; the container image decides it here.",
    "mode": _TOPOLOGY,
    "min_nodes": _TOPOLOGY,
    "max_nodes": _TOPOLOGY,
    "solo_only": _TOPOLOGY,
    "cluster_only": _TOPOLOGY,
    "layout": _TOPOLOGY,
    "scheduler": _TOPOLOGY,
    "target_host": "SparkPanel starts a recipe on the Spark you choose.",
    "containers": "per-host images are not imported: the recipe's container is used.",
    "runtime_config": "sparkrun's runtime-specific settings are not imported.",
    "builder": _BUILD,
    "builder_config": _BUILD,
    "build_args": _BUILD,
    "executor": "SparkPanel's engine runs each container itself.",
    "distribution_config": "SparkPanel downloads the model (and any draft model) itself.",
    "cluster_config": "sparkrun's cache paths are not imported.",
    "runtime_cache": "sparkrun's cache settings are not imported.",
    "readiness": "SparkPanel watches a run's health itself.",
    "capabilities": "",
    "unsupported_capabilities": "",
    "benchmark": "sparkrun's benchmark settings are not imported: queue benchmarks in SparkPanel.",
    "stop_after_post": "",
}
_CODE_KEYS = {"mods": "mod", "patches": "patch", "pre_exec": "pre_exec",
              "post_exec": "post_exec", "post_commands": "post_exec"}  # fmt: skip
MAX_CODE_ITEMS = 32
MAX_VARIANTS = 16
_VARIANT_OWN = {"description", "container", "env", "mods", "patches"}


def looks_like_sparkrun(doc: object) -> bool:
    """Tell a sparkrun (or eugr run-recipe) recipe from SparkPanel's own YAML."""
    if not isinstance(doc, Mapping):
        return False
    if "recipes" in doc or "sparkpanel" in doc:
        return False
    model = doc.get("model")
    if isinstance(model, str) and model.strip():
        return any(key in doc for key in ("container", "defaults", "metadata", "runtime",
                                          "command", "recipe_version"))  # fmt: skip
    # eugr's run-recipe format names the model only inside its command.
    command = doc.get("command")
    return (
        model is None and isinstance(command, str) and "vllm serve" in command
        and any(key in doc for key in ("container", "recipe_version"))
    )  # fmt: skip


def parse_sparkrun(doc: Mapping[str, object], *, name_hint: str = "") -> SparkrunRecipe:
    """Map one sparkrun recipe onto recipe fields, collecting every problem at once.

    Raises SparkrunImportError only when nothing sensible can be imported (not a mapping,
    no model, another engine); everything else is in `errors` or `ignored`."""
    if not isinstance(doc, Mapping):
        raise SparkrunImportError(
            f"A sparkrun recipe is a YAML mapping (model:, container:, defaults:, ...), "
            f"got a {type(doc).__name__}."
        )
    command = doc.get("command")
    _check_runtime(doc.get("runtime"), command if isinstance(command, str) else "")
    model = _model(doc, command)
    recipe = _parse(doc, model, name_hint)
    variants = doc.get("variants")
    if isinstance(variants, Mapping):
        for name, layer in list(variants.items())[:MAX_VARIANTS]:
            if not isinstance(layer, Mapping):
                recipe.ignored.append(f"variants.{clip(name, 40)}: expected a mapping; skipped.")
                continue
            variant_doc = _variant(doc, layer)
            base = recipe.fields.get("name", "")
            recipe.variants.append(
                (str(name), _parse(variant_doc, model, f"{base} ({clip(name, 40)})", variant=True))
            )
        if len(variants) > MAX_VARIANTS:
            recipe.ignored.append(f"variants: only the first {MAX_VARIANTS} were read.")
    elif variants is not None:
        recipe._error("variants", f"expected a mapping of variants, got {shown_value(variants)}")
    return recipe


def _model(doc: Mapping, command: object) -> str:
    model = doc.get("model")
    if isinstance(model, str) and model.strip():
        return model.strip()
    if model is None and isinstance(command, str):
        # eugr's format: the model is the command's own (`vllm serve org/name ...`).
        try:
            serve, _ = split_command(render(command, {}))
        except (ValueError, PlaceholderError):
            serve = None
        if serve and len(serve) > 2 and not serve[2].startswith(("-", "{")):
            return serve[2]
    raise SparkrunImportError("The sparkrun recipe has no 'model' (a Hugging Face model id).")


def _variant(doc: Mapping, layer: Mapping) -> dict:
    """A community variant: its own description, container, env, mods and patches; every
    other key is a default."""
    out = {k: v for k, v in doc.items() if k != "variants"}
    defaults = dict(out.get("defaults") or {}) if isinstance(out.get("defaults"), Mapping) else {}
    defaults.update({str(k): v for k, v in layer.items() if k not in _VARIANT_OWN})
    out["defaults"] = defaults
    for key in ("description", "container", "mods", "patches"):
        if key in layer:
            out[key] = layer[key]
    if isinstance(layer.get("env"), Mapping):
        env = dict(out.get("env") or {}) if isinstance(out.get("env"), Mapping) else {}
        env.update(layer["env"])
        out["env"] = env
    return out


def _parse(doc: Mapping, model: str, name_hint: str, *, variant: bool = False) -> SparkrunRecipe:
    recipe = SparkrunRecipe()
    fields_ = recipe.fields
    metadata = section_mapping(doc, "metadata", recipe)
    defaults = section_mapping(doc, "defaults", recipe)
    command = doc.get("command")

    fields_["name"] = name_hint if variant else recipe_name(doc, metadata, name_hint, model, recipe)
    fields_["model_id"] = model
    revision = ""
    if doc.get("model_revision") not in (None, ""):
        revision = read_text(doc["model_revision"], "model_revision", recipe) or ""
        if revision:
            fields_["revision"] = revision
    recipe.description = recipe_description(doc, metadata, recipe)

    unknown: list[str] = []
    for key in doc:
        if key in TOP_LEVEL_MAPPED:
            continue
        if key in TOP_LEVEL_IGNORED:
            sentence = TOP_LEVEL_IGNORED[key]
            if sentence:
                recipe.ignored.append(f"{key}: {sentence}")
            continue
        if key == "include":
            recipe._error(
                "include",
                f"this recipe is a change to the recipe {clip(doc[key], 60)!s}, which is not "
                "here: import it from its registry (Recipes → Registries), or paste the "
                "whole recipe",
            )
            continue
        unknown.append(clip(str(key), 60))
        recipe.ignored.append(
            f"{unknown[-1]}: a key sparkrun does not know; kept with the recipe's source, not used."
        )

    env = read_env(doc.get("env"), recipe)
    container = apply_overrides(doc.get("overrides"), defaults, env, recipe)
    image = container if container is not None else doc.get("container")
    if image is not None:
        text = read_text(image, "container", recipe)
        if text:
            fields_["image"] = text
    if env:
        fields_["env"] = env
    fields_["mods"] = _code(doc, recipe)
    _noted_mounts(doc, recipe)
    read_metadata(metadata, recipe)

    chain = {**defaults, "model": model}
    if revision:
        chain.setdefault("model_revision", revision)
    chain.setdefault("gpu_memory_utilization", GB10_DEFAULT_UTILIZATION)
    if isinstance(command, str) and command.strip():
        argv = _rendered(command, chain, recipe)
        used = set(re.findall(r"\{(\w+)\}", command))
        unused = [k for k in defaults if k not in used and k not in ("host", "port")
                  and k not in CONSUMED_KEYS]  # fmt: skip
        if unused:
            recipe.ignored.append(
                "defaults not named in the command (sparkrun passes only the command): "
                + ", ".join(clip(k, 40) for k in unused[:20])
            )
    elif command is not None and not isinstance(command, str):
        recipe._error("command", f"expected text, got {shown_value(command)}")
        return recipe
    else:
        argv = structured_argv(model, revision, chain)
        unmapped = unmapped_keys(defaults)
        if unmapped:
            recipe.ignored.append(
                "defaults sparkrun does not pass to vLLM without a command (not in its flag "
                "map): " + ", ".join(clip(k, 40) for k in unmapped[:20])
            )
    if argv is None:
        return recipe
    if not any(a.split("=", 1)[0] == "--served-model-name" for a in argv):
        # sparkrun appends the served name when the command has none.
        served = defaults.get("served_model_name")
        if isinstance(served, str) and served.strip():
            argv += ["--served-model-name", served.strip()]
    read_vector(argv, model, recipe, "command" if isinstance(command, str) else "defaults")
    _folders(argv, doc, recipe)
    if "gpu_memory_utilization" not in fields_:
        fields_["gpu_memory_utilization"] = GB10_DEFAULT_UTILIZATION
        recipe.ignored.append(
            "gpu_memory_utilization: the command gives none (vLLM would take its 0.92, above "
            f"the Spark rule); the recipe uses {GB10_DEFAULT_UTILIZATION}, sparkrun's GB10 "
            "default."
        )
    draft = doc.get("draft_model")
    if draft is not None:
        recipe.ignored.append(
            f"draft_model ({clip(draft, 80)}): the speculative decoding vLLM runs is the "
            "command's --speculative-config (its `model` is the draft)"
            + ("." if "--speculative-config" in (fields_.get("extra_args") or []) else
               "; this recipe's command has none, so sparkrun runs without one too.")
        )  # fmt: skip
    fields_["source"] = {
        "format": "eugr" if str(doc.get("recipe_version", "")) == "1" else "sparkrun",
        "metadata": kept(metadata),
        **({"maintainer": kept(doc["maintainer"])} if "maintainer" in doc else {}),
        **({"unknown_keys": unknown[:20]} if unknown else {}),
    }
    return recipe


def _volumes(doc: Mapping) -> list:
    """The recipe's `volumes` and executor_config's (a bare string is a one-item list, as
    sparkrun reads it)."""
    out: list = []
    executor = doc.get("executor_config")
    for value in (doc.get("volumes"), executor.get("volumes") if isinstance(executor, Mapping)
                  else None):  # fmt: skip
        if value:
            out += value if isinstance(value, list) else [value]
    return out


def _mount_targets(doc: Mapping) -> dict[str, str]:
    """Container path → host folder, for the recipe's volumes."""
    out = {}
    for item in _volumes(doc)[:64]:
        if isinstance(item, str) and ":" in item:
            source, _, rest = item.partition(":")
            out[rest.split(":", 1)[0].rstrip("/") or "/"] = source
    return out


def _folders(argv: list[str], doc: Mapping, recipe: SparkrunRecipe) -> None:
    """The recipe's mounted folders its vLLM options read (a draft model at `/drafter`, a
    tokenizer…): kept as they are, as the recipe's `folders` — SparkPanel never mounts a
    recipe's volumes; a host runs the recipe once an admin gave it a model folder there."""
    targets = _mount_targets(doc)
    used = []
    for target, source in targets.items():
        if target == "/" or not any(
            arg == target or arg.startswith(target + "/") or f'"{target}"' in arg
            or f'"{target}/' in arg
            for arg in argv[3:]
        ):  # fmt: skip
            continue
        used.append({"path": target, "source": str(source)[:300]})
    if not used:
        return
    recipe.fields["folders"] = used[:16]
    shown = ", ".join(f"{f['path']} ({clip(f['source'], 60)})" for f in used[:4])
    draft = doc.get("draft_model")
    hint = (f" — or read the draft from the Hub: set the speculative config's model to "
            f"{clip(draft, 80)}" if isinstance(draft, str) and draft.strip() else "")  # fmt: skip
    recipe.ignored.append(
        f"folders {shown}: the command reads them where the recipe mounts them; SparkPanel "
        "never mounts a recipe's volumes, so a host runs this recipe once an admin gives it "
        f"a model folder at that path (Host → model folders){hint}."
    )


def _rendered(command: str, chain: dict, recipe: SparkrunRecipe) -> list[str] | None:
    try:
        rendered = render(command, chain)
    except PlaceholderError as exc:
        recipe._error("command", f"{exc}; the command was not read.")
        return None
    try:
        serve, others = split_command(rendered)
    except ValueError as exc:
        recipe._error("command", str(exc))
        return None
    for step in others[:MAX_CODE_ITEMS]:
        recipe.fields["mods"] = [
            *recipe.fields.get("mods", []),  # type: ignore[misc]
            {"kind": "command", "text": clip(step, 2000)},
        ]
    if serve is None:
        recipe._error("command", "the command starts no `vllm serve`: SparkPanel runs vLLM only.")
        return None
    return serve


def _code(doc: Mapping, recipe: SparkrunRecipe) -> list[dict]:
    """mods, patches and commands around the container: kept as the code they are."""
    out: list[dict] = []
    for key, kind in _CODE_KEYS.items():
        value = doc.get(key)
        if value in (None, "", []):
            continue
        items = value if isinstance(value, list) else [value]
        for item in items[:MAX_CODE_ITEMS]:
            if kind in ("mod", "patch"):
                if not isinstance(item, str) or not item.strip():
                    recipe._error(key, f"expected names of {kind}s, got {shown_value(item)}")
                    continue
                out.append({"kind": kind, "name": clip(item.strip(), 200)})
            else:
                text = (
                    item
                    if isinstance(item, str)
                    else shlex.join(
                        str(v) for v in (item.values() if isinstance(item, Mapping) else [item])
                    )
                )
                out.append({"kind": kind, "text": clip(text, 2000)})
        if len(items) > MAX_CODE_ITEMS:
            recipe._error(key, f"more than {MAX_CODE_ITEMS} entries")

    def listed(kinds: set[str]) -> str:
        chosen = [m.get("name") or clip(m.get("text") or "", 40) for m in out if m["kind"] in kinds]
        return ", ".join(chosen[:6]) + (", …" if len(chosen) > 6 else "")

    if any(m["kind"] == "mod" for m in out):
        recipe.ignored.append(
            f"mods kept ({listed({'mod'})}): code that runs in the container before vLLM; a "
            "start applies them only where an admin reviewed and approved each one for the "
            "host (docs/recipes.md, Mods)."
        )
    if any(m["kind"] == "patch" for m in out):
        recipe.ignored.append(
            f"patches kept ({listed({'patch'})}): sparkrun does not apply a `patches:` list "
            "(it names what the recipe's image was built with), and neither does SparkPanel."
        )
    steps = {"pre_exec", "post_exec", "post_commands", "command"}
    if any(m["kind"] in steps for m in out):
        recipe.ignored.append(
            f"commands around vLLM kept ({listed(steps)}): shell code SparkPanel never runs"
            " — a start refuses the recipe until they are "
            "removed or built into an image or a reviewed mod (docs/recipes.md, Mods)."
        )
    return out


def _noted_mounts(doc: Mapping, recipe: SparkrunRecipe) -> None:
    """`volumes` and `executor_config` (its volumes, devices, privileges, user…) never become
    container options: the engine builds every container from the host's settings alone."""
    volumes = _volumes(doc)
    executor = doc.get("executor_config")
    if volumes:
        shown = ", ".join(clip(v, 60) for v in volumes[:5])
        recipe.ignored.append(
            f"volumes ({shown}): never mounted — a recipe adds no mounts; the model comes "
            "into the host's Hugging Face cache, and a folder the command reads needs a host "
            "model folder an admin sets."
        )
    if isinstance(executor, Mapping):
        keys = [clip(str(k), 30) for k in executor if k != "volumes"]
        if keys:
            recipe.ignored.append(
                f"executor_config ({', '.join(keys[:10])}): container settings never come from "
                "a recipe; the host's engine sets them."
            )
    elif executor is not None:
        recipe.ignored.append("executor_config: not a mapping; ignored.")


def _check_runtime(runtime: object, command: str) -> None:
    if runtime is None or runtime == "":
        # sparkrun defaults to vLLM but first looks at what the command starts.
        for pattern, engine in _OTHER_ENGINE_COMMANDS:
            if pattern.match(command.strip()):
                raise SparkrunImportError(
                    f"This sparkrun recipe's command starts {engine}, not vLLM: SparkPanel "
                    "runs vLLM only."
                )
        return
    if not isinstance(runtime, str):
        raise SparkrunImportError(f"runtime must be text such as 'vllm', got {clip(runtime)}.")
    if runtime.strip().lower() not in VLLM_RUNTIMES:
        raise SparkrunImportError(
            f"This sparkrun recipe uses the '{clip(runtime.strip(), 60)}' runtime: SparkPanel "
            "runs vLLM only (runtime: vllm)."
        )


__all__ = [
    "FLAG_OF_KEY",
    "TOP_LEVEL_IGNORED",
    "TOP_LEVEL_MAPPED",
    "VLLM_RUNTIMES",
    "looks_like_sparkrun",
    "parse_sparkrun",
]

"""What vLLM will do when it starts a command on a host: the figures it prints ("Model
loading took", "Available KV cache memory", "GPU KV cache size", "Maximum concurrency") and
whether it starts, or the error it raises, in its words — per vLLM version.

    predict(config, argv, vllm_version=…, total_gib=…, free_gib=…, checkpoint_gib=…, env=…)

Pure Python (the command's options are read with the contract of the nearest vLLM version
the panel has; an option that contract does not know is noted and left out). The parts:
model.py (config.json → layers), budget.py (the memory before the KV cache, the start
gate), kv.py (the KV layout, the fit check, the capacity line), rules.py (what each version
does differently). docs/recipes.md, "What vLLM does at start-up".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from vllm_adapter import contract as vllm_contract
from vllm_adapter import speculative
from vllm_adapter.startup.budget import GIB, Budget, budget
from vllm_adapter.startup.kv import CacheOptions, Layout, capacity, layout
from vllm_adapter.startup.model import ModelConfigError, TextModel, read_model
from vllm_adapter.startup.rules import rules_for

__all__ = ["ModelConfigError", "Prediction", "predict", "read_options"]


@dataclass
class Prediction:
    vllm_version: str
    model_loading_gib: float | None
    available_kv_cache_gib: float | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    starts: bool
    error: str | None
    max_model_len: int = 0
    block_size: int = 0
    breakdown: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The KV cache layout (kv.py): `layout.blocks_at(n)` is what a request of n tokens holds
    # over every group, as vLLM's KV cache manager allocates it. Not part of as_dict().
    layout: Layout | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict:
        out = asdict(self)
        out.pop("layout", None)
        return out


def _drafter_layers(family: str, config: Mapping | None, notes: list[str],
                    name: str) -> tuple:  # fmt: skip
    """The layers of a draft model or DFlash drafter whose config.json is known, for the KV
    cache layout; () otherwise (with a note when its KV goes uncounted)."""
    if family not in (speculative.DRAFT_MODEL, speculative.DFLASH):
        return ()
    if not config:
        notes.append(f"the drafter's config.json ({name}) is not known: its KV layers are not "
                     "counted")  # fmt: skip
        return ()
    try:
        return tuple(read_model(dict(config)).layers)
    except (ModelConfigError, ValueError, TypeError) as exc:
        notes.append(f"the drafter's config.json ({name}) cannot be read ({exc}): its KV "
                     "layers are not counted")  # fmt: skip
        return ()


def read_options(argv: Sequence[str], version: str) -> tuple[dict, list[str]]:
    """The command's options as vLLM reads them (the nearest contract), and notes on what
    was left out."""
    known = vllm_contract.available_versions()
    chosen = _nearest(version, known)
    spec = vllm_contract.load(chosen)
    notes = [] if chosen == version else [
        f"options read with vLLM {chosen}'s parser (the panel has no contract for {version})"
    ]  # fmt: skip
    args = list(argv)
    kept: list[str] = args[:3]
    i = 3
    while i < len(args):
        arg = args[i]
        flag = arg.split("=", 1)[0]
        if arg.startswith("-") and not spec.has(flag) and not flag.startswith("--no-"):
            takes = "=" not in arg and i + 1 < len(args) and not args[i + 1].startswith("-")
            notes.append(f"{flag}: not an option of vLLM {chosen}; left out")
            i += 2 if takes else 1
            continue
        kept.append(arg)
        i += 1
    try:
        values = spec.parse(kept)
    except vllm_contract.ArgvError as exc:
        raise ValueError(str(exc)) from None
    return values, notes


def _nearest(version: str, known: list[str]) -> str:
    if version in known:
        return version
    key = vllm_contract.version_key(version)
    older = [v for v in known if vllm_contract.version_key(v) <= key]
    return (
        max(older, key=vllm_contract.version_key)
        if older
        else min(known, key=vllm_contract.version_key)
    )


def _spec(value) -> dict:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value.strip():
        try:
            loaded = json.loads(value)
        except ValueError:
            return {}
        return loaded if isinstance(loaded, dict) else {}
    return {}


def smallest_utilization(plan: Budget, lay, seqs: int, total_gib: float,
                         utilization: float) -> dict:  # fmt: skip
    """The smallest utilization (two decimals, up) whose KV cache holds `seqs` requests of
    max_model_len at once — with what it leaves the rest of the machine. The memory before
    the KV cache does not change with the utilization (vLLM's profile is the same)."""
    import math

    needed_kv = lay.bytes_per_block * (seqs * lay.blocks_per_request + 1)
    before = plan.requested - plan.available_kv  # weights, profile peak, graphs…
    total = total_gib * GIB
    value = math.ceil((needed_kv + before) / total * 100) / 100
    if value > 1:  # not on this machine at any utilization
        return {"for_sequences": seqs, "utilization": None, "leaves_gib": None,
                "needs_kv_gib": round(needed_kv / GIB, 2), "above_the_command": True}  # fmt: skip
    return {
        "for_sequences": seqs,
        "utilization": value,
        "leaves_gib": round(total_gib * (1 - value), 2),
        "needs_kv_gib": round(needed_kv / GIB, 2),
        "above_the_command": value > utilization,
    }


def _language_only(options: Mapping) -> bool:
    """--language-model-only, or every modality limited to 0 items: no encoder profiled."""
    if options.get("language_model_only"):
        return True
    limits = _spec(options.get("limit_mm_per_prompt"))
    return bool(limits) and all(
        (v.get("count", 0) if isinstance(v, dict) else v) in (0, "0") for v in limits.values()
    )


def _int(value, default: int | None = None) -> int | None:
    if value in (None, ""):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def predict(config: Mapping, argv: Sequence[str], *, vllm_version: str, total_gib: float,
            free_gib: float | None = None, checkpoint_gib: float | None = None,
            env: Mapping[str, str] | None = None, device: str = "cuda",
            drafter_gib: float | None = None,
            drafter_config: Mapping | None = None) -> Prediction:  # fmt: skip
    """What vLLM `vllm_version` does at start-up for `argv` on a host with `total_gib` GiB
    (`free_gib` free now): the model's config.json, its checkpoint's size and, for a
    speculative drafter with a checkpoint of its own (EAGLE, DFlash, a draft model), that
    checkpoint's size `drafter_gib` (not counted when unknown, and the notes say so) and
    its config.json `drafter_config` (a draft model's or DFlash drafter's attention layers
    hold KV too; without it they are not counted, and the notes say so)."""
    rules = rules_for(vllm_version)
    model: TextModel = read_model(config)
    options, notes = read_options(argv, vllm_version)
    env = dict(env or {})
    tp = _int(options.get("tensor_parallel_size"), 1) or 1
    pp = _int(options.get("pipeline_parallel_size"), 1) or 1
    utilization = float(options.get("gpu_memory_utilization") or rules.default_utilization)
    native = model.max_position_embeddings or 0
    max_len = _int(options.get("max_model_len"), None)
    if max_len is None or max_len <= 0:
        max_len = native
    seqs = _int(options.get("max_num_seqs"), None) or rules.default_max_num_seqs
    tokens = _int(options.get("max_num_batched_tokens"), None) or rules.default_batched_tokens
    tokens = min(tokens, seqs * max_len) if max_len else tokens
    spec = _spec(options.get("speculative_config"))
    method = speculative.method_of(spec)
    num_spec = _int(spec.get("num_speculative_tokens"), 0) or 0
    family = speculative.method_family(method) if method else ""
    loads_draft = family == speculative.MTP
    own_drafter = family in (speculative.EAGLE, speculative.DFLASH, speculative.DRAFT_MODEL)
    prefix = options.get("enable_prefix_caching")
    cache = CacheOptions(
        kv_cache_dtype=str(options.get("kv_cache_dtype") or "auto"),
        block_size=_int(options.get("block_size"), None),
        tensor_parallel_size=tp, pipeline_parallel_size=pp, max_model_len=max_len,
        max_num_batched_tokens=tokens,
        enable_prefix_caching=None if prefix is None else bool(prefix),
        num_speculative_tokens=num_spec, speculative_method=method,
        mamba_cache_dtype=str(options.get("mamba_cache_dtype") or "auto"),
        mamba_ssm_cache_dtype=str(options.get("mamba_ssm_cache_dtype") or "auto"),
        async_scheduling=options.get("async_scheduling") is not False,
        drafter_layers=_drafter_layers(family, drafter_config, notes, spec.get("model") or method),
    )  # fmt: skip
    pinned = _int(options.get("kv_cache_memory_bytes"), None)
    cpu_space = str(env.get("VLLM_CPU_KVCACHE_SPACE") or "").strip()
    if device == "cpu" and pinned is None and cpu_space.isdigit():
        # vLLM's CPU backend sizes its KV cache from this setting (platforms/cpu.py: it
        # becomes kv_cache_memory_bytes), not from the utilization.
        pinned = int(cpu_space) * GIB
        notes.append(f"VLLM_CPU_KVCACHE_SPACE={cpu_space}: the CPU backend's KV cache size")
    plan: Budget = budget(
        model=model, total_gib=total_gib, free_gib=free_gib, utilization=utilization,
        tokens=tokens, seqs=seqs, tp=tp, checkpoint_gib=checkpoint_gib, loads_draft=loads_draft,
        eager=bool(options.get("enforce_eager")), kv_cache_memory_bytes=pinned, rules=rules,
        env=env, max_model_len=max_len, language_only=_language_only(options),
        num_spec=num_spec, drafter_gib=drafter_gib if own_drafter else None,
    )  # fmt: skip
    lay = layout(model, cache, rules)
    notes += plan.notes + lay.notes
    if own_drafter and not drafter_gib:
        notes.append(f"the drafter's own checkpoint ({spec.get('model') or method}) is not in "
                     "the cache: its weights are not counted")  # fmt: skip
    if pp > 1:  # not modelled yet: each rank holds its share of the layers and weights
        notes.append(f"--pipeline-parallel-size {pp}: not modelled — figures are for one rank "
                     "holding every layer, so weights are high and KV tokens low")  # fmt: skip
    breakdown = {
        "gpu_memory_utilization": options.get("gpu_memory_utilization"),  # None: vLLM's default
        "requested_gib": round(plan.requested / GIB, 2),
        "weights_gib": round(plan.weights / GIB, 2), "weights_from": plan.weights_source,
        "activation_peak_gib": round(plan.activation_peak / GIB, 2),
        "non_torch_gib": round(plan.non_torch / GIB, 2),
        "cudagraph_estimate_gib": round(plan.cudagraph_estimate / GIB, 2),
        "cudagraph_subtracted": plan.cudagraph_subtracted,
        "max_num_batched_tokens": tokens, "max_num_seqs": seqs,
        "block_size": lay.block_size, "page_bytes": lay.page_bytes,
        "groups": lay.groups, "bytes_per_block": lay.bytes_per_block,
        "blocks_per_request": lay.blocks_per_request, "mamba_cache_mode": lay.mamba_mode,
        "ssm_state_dtype": lay.ssm_dtype if model.is_hybrid else None,
    }  # fmt: skip
    weights_gib = round(plan.weights / GIB, 2)
    if plan.error:  # the start gate comes before anything is loaded
        return Prediction(vllm_version, None, None, None, None, False, plan.error, max_len,
                          lay.block_size, breakdown, notes)  # fmt: skip
    free_for_weights = (free_gib * GIB) if free_gib is not None else total_gib * GIB
    if plan.weights > free_for_weights:
        error = (
            f"CUDA out of memory while loading the weights: {weights_gib:.2f} GiB per rank "
            f"do not fit the {free_for_weights / GIB:.2f} GiB the GPU has free"
        )
        return Prediction(vllm_version, None, None, None, None, False, error, max_len,
                          lay.block_size, breakdown, notes)  # fmt: skip
    available = plan.available_kv
    if not pinned:
        breakdown["smallest_utilization"] = smallest_utilization(
            plan, lay, seqs, total_gib, utilization
        )
    fit = capacity(lay, available, max_len, rules)
    shown_kv = round(available / GIB, 2)  # "Available KV cache memory": what the profile left
    if fit.error:
        return Prediction(vllm_version, weights_gib, shown_kv, None, None, False, fit.error,
                          max_len, lay.block_size, breakdown, notes)  # fmt: skip
    return Prediction(
        vllm_version, weights_gib, shown_kv, fit.kv_cache_tokens, round(fit.max_concurrency, 2),
        True, None, max_len, lay.block_size, {**breakdown, "num_blocks": fit.num_blocks}, notes,
        layout=lay,
    )  # fmt: skip

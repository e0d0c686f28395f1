"""What the panel tells sparksim about the recipe's checkpoint and the host it runs on.

Real vLLM learns the weight format and size from the checkpoint it loads and the memory
from the GPU; sparksim has neither, so an engine that starts it for a simulated host
passes the same facts the planner used (apps/hosts/engines/base.py):

* `SPARKSIM_CHECKPOINT`: the recipe's checkpoint, as JSON with the fields of the planner's
  `Architecture` (parameters, weight format or checkpoint size, layers, KV heads, ...);
* `SPARKSIM_HOST`: the host's memory, as JSON with the fields of the planner's `HostSpec`.

With them sparksim computes memory with the planner's own functions from the same
inputs, so the recipe the planner calls "does not fit" is the one that fails to start.
Without them (sparksim started by hand) the model's profile and a stock Spark are used.
"""

from __future__ import annotations

import dataclasses
import json
import os

from sparkdomain.planner import Architecture, HostSpec, kv_bytes_per_token_split, weight_bytes

CHECKPOINT_ENV = "SPARKSIM_CHECKPOINT"
HOST_ENV = "SPARKSIM_HOST"
# A simulated pair's Ray node, each Spark's own (sparksim/tensor_parallel.py): the meminfo
# file and the faults of the Spark the node runs on, inherited by the rank Ray starts there.
NODE_MEMINFO_ENV = "SPARKSIM_NODE_MEMINFO"
NODE_FAULTS_ENV = "SPARKSIM_NODE_FAULTS"


# What decides the weights' size, and what decides the KV cache's: each group is taken
# from the recipe as a whole when the recipe has it, else from the profile (never half of
# one and half of the other: a profile's NVFP4 parameter count read as BF16 is no model).
WEIGHT_FIELDS = ("total_params_b", "active_params_b", "weight_format", "weight_gb")
KV_FIELDS = (
    "num_layers",
    "attention_layers",
    "kv_heads",
    "head_dim",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "sliding_window_layers",
    "sliding_window",
    "recurrent_state_mib",
    "checkpoint_kv_dtype",
)


def _json(name: str, environ: dict[str, str]) -> dict:
    raw = environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, not {type(value).__name__}")
    return value


def _known(cls: type, values: dict) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def checkpoint_architecture(
    profile_arch: Architecture, environ: dict[str, str] | None = None
) -> Architecture:
    """The architecture memory is computed from: the recipe's where it says enough."""
    environ = os.environ if environ is None else environ
    values = _known(Architecture, _json(CHECKPOINT_ENV, environ))
    if not values:
        return profile_arch
    recipe = dataclasses.replace(Architecture(), **values)
    merged = profile_arch
    if weight_bytes(recipe) is not None:
        merged = dataclasses.replace(merged, **{f: getattr(recipe, f) for f in WEIGHT_FIELDS})
    if kv_bytes_per_token_split(recipe, 2) is not None:
        merged = dataclasses.replace(merged, **{f: getattr(recipe, f) for f in KV_FIELDS})
    return merged


# What the host IS (its memory, what CUDA sees of it, what its OS keeps): taken from the
# host. What vLLM will TAKE (CUDA context, CUDA graphs) is the planner's estimate, which an
# admin may set wrong; sparksim takes what vLLM takes on a Spark, so that a wrong estimate
# shows as a gap between plan and measurement, as it would on the real machine.
HOST_FACTS = ("physical_memory_gb", "cuda_visible_gib", "bandwidth_gbs", "os_reserve_gb")


def host_spec(environ: dict[str, str] | None = None) -> HostSpec:
    """The host's memory facts (a stock Spark's where none are given)."""
    environ = os.environ if environ is None else environ
    values = _known(HostSpec, _json(HOST_ENV, environ))
    return HostSpec(**{k: values[k] for k in HOST_FACTS if values.get(k) is not None})

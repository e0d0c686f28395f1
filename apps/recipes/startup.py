"""What vLLM will do when a recipe starts on a host — the start-up prediction
(vllm_adapter/startup) for the recipe's exact vector, from the model's stored facts
(ModelFacts: config.json and checkpoint size). docs/recipes.md, "What vLLM does at start-up"."""

from __future__ import annotations

from apps.hosts.models import Host
from apps.recipes.launch import bind_address
from apps.recipes.models import ModelFacts, Recipe
from sparkdomain.command import UnsafeCommand, serve_argv
from vllm_adapter import contract as vllm_contract
from vllm_adapter.startup import ModelConfigError, predict

GIB = 1 << 30


def vllm_prediction(recipe: Recipe, host: Host | None = None, *, free_now: bool = False) -> dict:
    """{"prediction", "facts", "host", "version", "free_gib"} on `host` (default: the default
    host), or {"missing": why}. With `free_now`, vLLM's start gate is judged against the
    memory the host has free now (its agent's MemAvailable) — what a page shows; admission
    leaves it out (its own memory rule runs when the start is taken, not queued)."""
    facts = ModelFacts.for_recipe(recipe)
    if facts is None:
        return {"missing": (
            f"the panel has not read {recipe.model_id}'s config.json yet: it does at the first "
            "download (Download now, or a start), or ask `manage.py spark plan`"
        )}  # fmt: skip
    host = host or Host.objects.default()
    version = host.contract_version if host else vllm_contract.latest_version()
    try:  # the vector vLLM gets (paths are the start's check, not the prediction's)
        argv = (serve_argv(recipe, host=bind_address(host), port=host.port_min)
                if host is not None else serve_argv(recipe))  # fmt: skip
    except UnsafeCommand as exc:
        return {"missing": f"the recipe's command cannot be built: {exc}"}
    free_gib = host.free_gib() if free_now and host is not None else None
    free_gib = None if free_gib is None else round(free_gib, 2)
    drafter = ModelFacts.for_drafter(recipe)
    try:
        prediction = predict(
            facts.config, argv, vllm_version=version,
            total_gib=host.cuda_visible_gib if host else 121.69, free_gib=free_gib,
            checkpoint_gib=facts.checkpoint_bytes / GIB if facts.checkpoint_bytes else None,
            drafter_gib=drafter.checkpoint_bytes / GIB
            if drafter is not None and drafter.checkpoint_bytes else None,
            drafter_config=drafter.config if drafter is not None else None,
        )  # fmt: skip
    except (ModelConfigError, ValueError) as exc:
        return {"missing": f"the stored config.json cannot be read: {exc}"}
    return {
        "prediction": prediction,
        "facts": facts,
        "host": host,
        "version": version,
        "free_gib": free_gib,
    }

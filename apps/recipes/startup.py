"""What vLLM will do when a recipe starts on a host — the start-up prediction
(vllm_adapter/startup) for the recipe's exact vector, from the model's stored facts
(ModelFacts: config.json and checkpoint size). docs/recipes.md, "What vLLM does at start-up"."""

from __future__ import annotations

from apps.hosts.models import Host
from apps.recipes.launch import default_argv
from apps.recipes.models import ModelFacts, Recipe
from vllm_adapter import contract as vllm_contract
from vllm_adapter.startup import ModelConfigError, predict

GIB = 1 << 30


def vllm_prediction(recipe: Recipe) -> dict:
    """{"prediction", "facts", "host", "version"} for the default host, or {"missing": why}."""
    facts = ModelFacts.for_recipe(recipe)
    if facts is None:
        return {"missing": (
            f"the panel has not read {recipe.model_id}'s config.json yet: it does at the first "
            "download (Download now, or a start), or ask `manage.py spark plan`"
        )}  # fmt: skip
    host = Host.objects.default()
    version = host.contract_version if host else vllm_contract.latest_version()
    argv = default_argv(recipe)
    if not argv:
        return {"missing": "the recipe's command cannot be built for the default host"}
    try:
        prediction = predict(
            facts.config, argv, vllm_version=version,
            total_gib=host.cuda_visible_gib if host else 121.69, free_gib=None,
            checkpoint_gib=facts.checkpoint_bytes / GIB if facts.checkpoint_bytes else None,
        )  # fmt: skip
    except (ModelConfigError, ValueError) as exc:
        return {"missing": f"the stored config.json cannot be read: {exc}"}
    return {"prediction": prediction, "facts": facts, "host": host, "version": version}

"""A recipe the planner says does not fit on a Spark, as seen in issue #16: Llama 3.3 70B in
BF16 (141 GB of weights: more than vLLM's whole pool) at 131,072 tokens × 32 sequences."""

from __future__ import annotations

from decimal import Decimal

from apps.recipes.models import Recipe

NAME = "Llama 70B BF16 long team"


def does_not_fit_recipe() -> Recipe:
    recipe, _ = Recipe.objects.update_or_create(
        slug="llama-70b-bf16-long-team",
        defaults={
            "name": NAME, "model_id": "meta-llama/Llama-3.3-70B-Instruct",
            "total_params_b": 70.6, "weight_format": "bf16", "num_layers": 80, "kv_heads": 8,
            "head_dim": 128, "gpu_memory_utilization": Decimal("0.85"), "max_model_len": 131072,
            "max_num_seqs": 32,
        },
    )  # fmt: skip
    return recipe

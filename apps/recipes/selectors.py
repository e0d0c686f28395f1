"""Read-only queries the recipe and run pages share."""

from __future__ import annotations

from apps.hosts.models import Host
from apps.recipes.models import Recipe


def start_form_context(selected_recipe: int | None = None) -> dict:
    """What the "start a run" form lists: every recipe and every host."""
    return {
        "start_recipes": Recipe.objects.all(),
        "start_hosts": Host.objects.all(),
        "selected_recipe": selected_recipe,
    }

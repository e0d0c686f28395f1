"""What the recipes app asks of the apps above it (provider signals: each receiver
returns a list, and the recipe pages show what every receiver returned, in order).

The runs app answers both (``apps/runs/apps.py``), from the plan checks its starts
recorded; with no receiver connected the pages simply show no measurements.

- ``plan_corrections(sender=Recipe, image, arch, flags, recipe=None)``: for every host
  with measured starts of ``image``, the plan for these inputs corrected by what vLLM
  measured there (``apps.runs.calibration.HostCorrection`` items);
- ``plan_checks(sender=Recipe, recipe, limit)``: the recipe's latest measured starts,
  one row (a dict) per run;
- ``mod_approvals(sender=Recipe, recipe)``: for each of the recipe's mods, a dict
  ``{name, hosts, state}`` — the hosts where an admin approved it (apps/runs/mods.py).
- ``page_sections(sender=Recipe, recipe, user)``: sections of the recipe's page that other
  apps own, each a dict ``{"template": name, "context": {...}}`` rendered in order (the
  gateway's on-demand catalog entry).
- ``capacity(sender=Recipe, recipe, run=None)``: the recipe's capacity story with what was
  measured (a ``sparkdomain.capacity.CapacityStory`` in a list): the benchmarks app answers
  from its jobs and the runs' measured starts; with `run`, that run's own start. With no
  receiver the pages show the plan's estimate (``predicted_capacity``).
"""

from __future__ import annotations

from django.dispatch import Signal

from apps.core.hooks import gathered
from apps.recipes.models import Recipe

plan_corrections = Signal()
plan_checks = Signal()
mod_approvals = Signal()
page_sections = Signal()
capacity = Signal()


def measured_corrections(*, image: str, arch, flags, recipe=None) -> list:
    """What earlier starts of ``image`` measured, per host (see ``plan_corrections``)."""
    return gathered(
        plan_corrections, sender=Recipe, image=image, arch=arch, flags=flags, recipe=recipe
    )


def measured_checks(recipe, limit: int = 10) -> list[dict]:
    """The recipe's latest measured starts (see ``plan_checks``)."""
    return gathered(plan_checks, sender=Recipe, recipe=recipe, limit=limit)


def approved_mods(recipe) -> list[dict]:
    """Where each of the recipe's mods may run (see ``mod_approvals``)."""
    return gathered(mod_approvals, sender=Recipe, recipe=recipe)


def sections(recipe, user) -> list[dict]:
    """The recipe page's sections other apps own (see ``page_sections``)."""
    return gathered(page_sections, sender=Recipe, recipe=recipe, user=user)


def capacity_story(recipe, run=None):
    """The recipe's capacity story with what was measured (see ``capacity``), else the
    plan's estimate."""
    from apps.recipes.services import predicted_capacity

    told = gathered(capacity, sender=Recipe, recipe=recipe, run=run)
    return told[0] if told else predicted_capacity(recipe.plan())

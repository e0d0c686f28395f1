"""Plan against measured, stored: each ready run records what vLLM reported beside what the
planner predicted for its recipe on its host (PlanCheck rows), and the next plan for the
same image on the same host reads them back as a correction. The arithmetic is pure and
lives in sparkdomain/calibration.py."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from django.db import DatabaseError

from apps.hosts.models import Host
from apps.runs.models import PlanCheck, Run
from sparkdomain import calibration as calc
from sparkdomain.planner import Architecture, Flags, plan

log = logging.getLogger(__name__)


def plan_check_record(*, run: Run) -> list[PlanCheck]:
    """Store what vLLM measured at this start beside the plan for its recipe on its host.
    Idempotent (one row per run and quantity); never fails the start it follows."""
    try:
        checks = calc.compare(run.recipe.plan(run.host.spec()), run.facts)
        common = {"run": run, "host": run.host, "recipe": run.recipe, "image": run.image,
                  "image_digest": run.image_digest,
                  "vllm_version": str(run.facts.get("vllm_version", ""))[:64]}  # fmt: skip
        rows = [
            PlanCheck(
                **common,
                quantity=c.quantity,
                predicted=c.predicted,
                measured=c.measured,
                ratio=c.ratio,
            )
            for c in checks
            if c.ratio is not None
        ]
        PlanCheck.objects.bulk_create(rows, ignore_conflicts=True)
        return rows
    except (DatabaseError, ValueError) as exc:  # bookkeeping: the server is ready regardless
        log.warning("run %s: plan check not recorded: %s", run.pk, exc)
        return []


def run_checks(run: Run) -> list[calc.Check]:
    """What the planner predicted for the run beside what vLLM reported: the stored
    prediction once the run recorded one (the recipe may have changed since), else the plan
    for the recipe as it is now and the facts read so far."""
    stored = {row.quantity: row for row in run.plan_checks.all()}
    try:
        live = {c.quantity: c for c in calc.compare(run.recipe.plan(run.host.spec()), run.facts)}
    except ValueError:  # a recipe the planner cannot plan (it says why on the recipe page)
        live = {q: calc.Check(q, None, calc.measured(run.facts)[q]) for q in calc.QUANTITIES}
    out = []
    for quantity in calc.QUANTITIES:
        row = stored.get(quantity)
        out.append(calc.Check(quantity, row.predicted, row.measured) if row else live[quantity])
    return out


@dataclass(frozen=True)
class HostCorrection:
    """The correction for one host (and image), ready for a template."""

    host: object
    image: str
    result: calc.CorrectedPlan
    scope: str
    digests: list[str]
    text: str


def corrections_for(*, host, image: str, recipe=None) -> tuple[dict[str, calc.Correction], str]:
    """Per quantity, the correction from the latest starts of `image` on `host`: those of
    `recipe` alone when it has any (the same model is the best evidence), else every
    recipe's. Returns (corrections, scope) where scope says which starts."""
    rows = PlanCheck.objects.filter(host=host, image=image)
    scope = ""
    if recipe is not None:
        if rows.filter(recipe=recipe).exists():
            rows, scope = rows.filter(recipe=recipe), "of this recipe"
        else:
            scope = "of other recipes"
    ratios: dict[str, list[float]] = defaultdict(list)
    for quantity, ratio in rows.order_by("-created_at", "-pk").values_list("quantity", "ratio"):
        if len(ratios[quantity]) < calc.WINDOW:
            ratios[quantity].append(ratio)
    found = {q: calc.correction(q, r) for q, r in ratios.items()}
    return {q: c for q, c in found.items() if c is not None}, scope


def host_corrections(
    *, image: str, arch: Architecture, flags: Flags, recipe=None
) -> list[HostCorrection]:
    """For every host that has measured starts of `image`, the plan for these inputs on
    that host with what vLLM measured there."""
    if not image:
        return []
    out = []
    for host in Host.objects.filter(plan_checks__image=image).distinct().order_by("name"):
        corrections, scope = corrections_for(host=host, image=image, recipe=recipe)
        if not corrections:
            continue
        try:
            result = calc.corrected(plan(arch, flags, host.spec()), corrections)
        except ValueError:
            continue
        digests = list(
            PlanCheck.objects.filter(host=host, image=image)
            .exclude(image_digest="")
            .order_by("-created_at")
            .values_list("image_digest", flat=True)
            .distinct()[:5]
        )
        text = calc.describe(result, host=host.name, image=image, scope=scope)
        out.append(HostCorrection(host, image, result, scope, list(dict.fromkeys(digests)), text))
    return out


def recipe_check_rows(recipe, limit: int = 10) -> list[dict]:
    """The recipe's latest measured starts, one row per run: host, image digest and the
    four quantities predicted beside measured."""
    runs = (
        Run.objects.filter(recipe=recipe, plan_checks__isnull=False)
        .distinct()
        .select_related("host")
        .prefetch_related("plan_checks")
        .order_by("-created_at")[:limit]
    )
    rows = []
    for run in runs:
        by_quantity = {c.quantity: c for c in run.plan_checks.all()}
        checks = [
            calc.Check(q, by_quantity[q].predicted, by_quantity[q].measured)
            if q in by_quantity
            else None
            for q in calc.QUANTITIES
        ]
        when = min(c.created_at for c in by_quantity.values())
        rows.append({"run": run, "checks": checks, "when": when})
    return rows

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
from apps.recipes.models import ModelFacts
from apps.runs.models import PlanCheck, Run
from sparkdomain import calibration as calc
from sparkdomain.planner import Architecture, Flags, plan
from vllm_adapter import contract as vllm_contract
from vllm_adapter.startup import ModelConfigError, predict
from vllm_adapter.startup.rules import version_key

GIB = 1 << 30

log = logging.getLogger(__name__)


def run_prediction(run: Run) -> tuple[dict[str, float | None], str]:
    """What the run's start was predicted to print, in the four quantities, and by which
    predictor: vLLM's own start-up accounting (vllm_adapter/startup) for the run's exact
    vector, the vLLM version its log printed and its host's memory, when the model's
    config.json is known (ModelFacts); else the panel planner's plan for the recipe.

    On vLLM's CPU backend the pool is a setting, not a profile (VLLM_CPU_KVCACHE_SPACE,
    which the log states: "Explicitly set (1.0/20.71) GiB for KV cache"): the prediction
    takes that pool and checks the layout — tokens and concurrency."""
    facts = ModelFacts.for_recipe(run.recipe)
    argv = [str(a) for a in (run.argv or [])]
    if facts is not None and len(argv) >= 3:
        version = str(run.facts.get("vllm_version") or run.host.contract_version or "")
        cpu = run.facts.get("kv_cache_device") == "cpu"
        pool = run.facts.get("kv_cache_gib")
        if cpu and isinstance(pool, int | float):
            argv += ["--kv-cache-memory-bytes", str(int(pool * GIB))]
        try:
            p = predict(
                facts.config, argv, vllm_version=version or vllm_contract.latest_version(),
                total_gib=float(run.host.cuda_visible_gib or 121.69), free_gib=None,
                checkpoint_gib=facts.checkpoint_bytes / GIB if facts.checkpoint_bytes else None,
                device="cpu" if cpu else "cuda",
            )  # fmt: skip
        except (ModelConfigError, ValueError) as exc:
            log.info("run %s: no start-up prediction (%s); the planner's plan instead", run.pk,
                     exc)  # fmt: skip
        else:
            return {
                calc.KV_CACHE_GIB: p.available_kv_cache_gib,
                calc.KV_CACHE_TOKENS: None if p.kv_cache_tokens is None
                else float(p.kv_cache_tokens),
                calc.MAX_CONCURRENCY: p.max_concurrency,
                calc.MODEL_MEMORY_GIB: None if cpu else p.model_loading_gib,
            }, PlanCheck.Predictor.VLLM  # fmt: skip
    plan_ = run.recipe.plan(run.host.spec())
    want = calc.predicted(plan_)
    version = str(run.facts.get("vllm_version") or "")
    if plan_.state_bytes_per_sequence and version and version_key(version) < (0, 20, 1):
        # Before 0.20.1 a hybrid's "GPU KV cache size" is blocks ÷ groups × block size
        # (v1/core/kv_cache_utils.py), not concurrency × length: another number, no ratio.
        want[calc.KV_CACHE_TOKENS] = None
    return want, PlanCheck.Predictor.PLANNER


def plan_check_record(*, run: Run) -> list[PlanCheck]:
    """Store what vLLM measured at this start beside what was predicted for it (see
    `run_prediction`). Idempotent (one row per run and quantity); never fails the start it
    follows."""
    try:
        want, predictor = run_prediction(run)
        got = calc.measured(run.facts)
        checks = [calc.Check(q, want[q], got[q]) for q in calc.QUANTITIES]
        common = {"run": run, "host": run.host, "recipe": run.recipe, "image": run.image,
                  "image_digest": run.image_digest, "predictor": predictor,
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
    got = calc.measured(run.facts)
    try:
        want, _ = run_prediction(run)
    except ValueError:  # a recipe the planner cannot plan (it says why on the recipe page)
        want = dict.fromkeys(calc.QUANTITIES)
    live = {q: calc.Check(q, want[q], got[q]) for q in calc.QUANTITIES}
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
    # The planner's plans are corrected by what the planner predicted for earlier starts
    # only: a start predicted by vLLM's accounting measures that prediction, not the plan.
    rows = PlanCheck.objects.filter(host=host, image=image, predictor=PlanCheck.Predictor.PLANNER)
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

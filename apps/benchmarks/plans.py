"""A queued job's plan (its suite's copy, `Suite.plan()`) and the levels it runs: which
scenarios, context depths and sweep levels, each as a harness `LevelSpec`, and whether a
recipe can run them (`plan_refusal`). No Django: plain dicts in, harness types out."""

from __future__ import annotations

from apps.benchmarks.harness.arrivals import Arrivals
from apps.benchmarks.harness.datasets import Dataset
from apps.benchmarks.harness.types import (
    Lengths,
    LevelSpec,
    Scenario,
    Sessions,
    SharedPrefix,
    level_refusal,
)

SCENARIO_NAME_CHARS = 100  # Result.scenario's max_length
DEPTH_QUESTION_TOKENS = 64  # a context-depth level: the same short question after the context
DEPTH_ANSWER_TOKENS = 128
RATE_WARMUP_STREAMS = 4  # a rate level's warm-up runs as a closed loop of this many (or the cap)


def default_levels(max_num_seqs: int) -> list[int]:
    """1, 2, 4, … up to twice the recipe's max-num-seqs (what an empty list means)."""
    levels, c = [], 1
    while c <= 2 * max(1, max_num_seqs):
        levels.append(c)
        c *= 2
    if levels[-1] != 2 * max_num_seqs:
        levels.append(2 * max_num_seqs)
    return levels


def plan_levels(plan: dict, max_num_seqs: int) -> list[tuple[str, LevelSpec]]:
    """The levels a job of `plan` (a suite as queued) runs, single-stream scenarios first;
    `max_num_seqs` (the recipe's) decides the sweep when the plan lists no levels."""
    levels: list[tuple[str, LevelSpec]] = []
    endpoint = plan.get("endpoint", "chat")  # plans queued before had chat only
    shared = SharedPrefix(**plan["shared_prefix"]) if plan.get("shared_prefix") else None
    varied = Lengths(**plan["lengths"]) if plan.get("lengths") else None
    extra = {"endpoint": endpoint, "shared_prefix": shared, "lengths": varied}
    depths = [
        {"name": f"context depth {d:,}", "prompt_tokens": d + DEPTH_QUESTION_TOKENS,
         "output_tokens": DEPTH_ANSWER_TOKENS}
        for d in plan.get("depths", [])
    ]  # fmt: skip
    for item in [*plan["scenarios"], *depths]:
        scenario = Scenario(item["name"], item["prompt_tokens"], item["output_tokens"])
        spec = LevelSpec(
            scenario, 1, plan["repetitions"], plan["warmup_requests"], plan["warm_prefix"],
            **extra,
        )  # fmt: skip
        levels.append(("scenario", spec))
    sweep = plan["sweep"]
    if plan.get("dataset"):  # the sweep's requests come from the dataset
        extra = {**extra, "dataset": Dataset(**plan["dataset"]), "shared_prefix": None,
                 "lengths": None}  # fmt: skip
    if sweep["enabled"] and sweep.get("mode") == "rate":  # plans queued before have no mode
        shape = Scenario(
            f"rates {sweep_shape(plan)}",
            sweep["prompt_tokens"],
            sweep["output_tokens"],
        )
        arrivals = sweep["arrivals"]
        cap = arrivals.get("max_concurrency")
        streams = min(cap or RATE_WARMUP_STREAMS, RATE_WARMUP_STREAMS)
        for rate in sweep["rates"]:
            spec = LevelSpec(
                shape, streams, sweep["requests_per_level"], max(plan["warmup_requests"], streams),
                plan["warm_prefix"], arrivals=Arrivals(rate=rate, **arrivals), **extra,
            )  # fmt: skip
            levels.append(("rate", spec))
    elif sweep["enabled"]:
        shape = Scenario(
            f"sweep {sweep_shape(plan)}"[:SCENARIO_NAME_CHARS],
            sweep["prompt_tokens"],
            sweep["output_tokens"],
        )
        if plan.get("sessions"):  # the users hold conversations
            extra = {**extra, "sessions": Sessions(**plan["sessions"])}
        for c in sweep["levels"] or default_levels(max_num_seqs):
            requests = max(sweep["requests_per_level"], c)
            warmup = max(plan["warmup_requests"], c)
            spec = LevelSpec(shape, c, requests, warmup, plan["warm_prefix"], **extra)
            levels.append(("sweep", spec))
    return levels


def sweep_shape(plan: dict) -> str:
    """The sweep's requests in a few characters: "1834/108" (prompt/answer tokens) or
    "ShareGPT" (a dataset's own lengths)."""
    sweep = plan["sweep"]
    if plan.get("dataset"):
        return "ShareGPT"
    if plan.get("sessions") and sweep.get("mode", "concurrency") == "concurrency":
        return Sessions(**plan["sessions"]).describe(sweep["prompt_tokens"], sweep["output_tokens"])
    return f"{sweep['prompt_tokens']}/{sweep['output_tokens']}"


def plan_refusal(plan: dict, *, max_num_seqs: int, max_model_len: int | None) -> str | None:
    """Why a job of `plan` must not run against a recipe (None: it may): the harness's
    bounds on every level, and prompt + answer within the recipe's max_model_len."""
    for _kind, spec in plan_levels(plan, max_num_seqs):
        refusal = level_refusal(spec, max_model_len)
        if refusal is not None:
            return f"{spec.scenario.name[:60]}: {refusal}"
    return None

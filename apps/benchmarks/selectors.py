"""What the benchmark pages show, read-only: a job's place in its host's queue and what
the queue form would meet, and, computed from stored results, the job and comparison
pages' tables, charts and exports."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min, Q
from django.utils import timezone

from apps.accounts.roles import OPERATE_RUNS
from apps.benchmarks import harness, reference
from apps.benchmarks.models import FINISHED_JOB_STATES, J, Job, Result, Suite
from apps.benchmarks.plans import sweep_shape
from apps.benchmarks.reference import (
    SEED_SOURCE,
    has_reference_shape,
    reference_missing_detail,
    seed_for,
    seed_notes,
)
from apps.core.csvsafe import csv_text
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.colocation import runs_on
from apps.runs.models import Run
from apps.runs.services import Occupancy, RunRefused, fit_check
from apps.runs.signals import Claim
from sparkdomain.planner import roofline_check

# --- the queue ------------------------------------------------------------------------


def suite_plan(suite: Suite) -> dict:
    """The suite as it is now: a queued job keeps this copy, whatever edits follow."""
    return suite.plan()


FINISHED_LIST_LIMIT = 50


def finished_jobs() -> list[Job]:
    """The Benchmarks page's finished jobs, newest first (every role sees every job): the
    page and its live list (`jobs-finished`, apps/benchmarks/live.py) show the same."""
    return list(
        Job.objects.filter(state__in=FINISHED_JOB_STATES).select_related(
            "recipe", "host", "suite", "queued_by"
        )[:FINISHED_LIST_LIMIT]
    )


def can_cancel(job: Job, user) -> bool:
    return job.is_active and (job.queued_by_id == user.pk or user.has_perm(OPERATE_RUNS))


@dataclass(frozen=True)
class QueueEntry:
    job: Job
    position: int  # 0 = running now
    estimated_start: datetime | None
    estimate_s: float | None
    # A queued job held up by another recipe: "waiting for spark-1 to be free: …" (the
    # host's run of another recipe, or jobs ahead for one); "" otherwise.
    waiting: str = ""


def _estimate_seconds(job: Job) -> float | None:
    """The median duration of recent finished jobs like this one (same suite and recipe,
    else same suite)."""
    done = Job.objects.filter(
        state=J.DONE, suite_id=job.suite_id, started_at__isnull=False, finished_at__isnull=False
    )
    for qs in (done.filter(recipe_id=job.recipe_id, host_id=job.host_id), done):
        durations = [j.duration_seconds() for j in qs.order_by("-finished_at")[:5]]
        if durations:
            return statistics.median(durations)
    return None


def host_queue_entries(host: Host) -> list[QueueEntry]:
    """The host's active jobs in execution order: the one running, then FIFO."""
    jobs = list(
        Job.objects.active()
        .filter(host=host)
        .select_related("recipe", "suite", "queued_by")
        .order_by("queued_at", "pk")
    )
    running = [j for j in jobs if j.state != J.QUEUED]
    queued = [j for j in jobs if j.state == J.QUEUED]
    now = timezone.now()
    entries: list[QueueEntry] = []
    clock: datetime | None = now
    # Queued jobs mostly share a suite and recipe: one estimate per kind, not per job (a
    # queue of hundreds would otherwise cost hundreds of queries on every page and push).
    estimates: dict[tuple[int, int, int], float | None] = {}

    def estimate_seconds(job: Job) -> float | None:
        key = (job.suite_id, job.recipe_id, job.host_id)
        if key not in estimates:
            estimates[key] = _estimate_seconds(job)
        return estimates[key]

    for job in running:
        estimate = estimate_seconds(job)
        entries.append(QueueEntry(job, 0, job.started_at, estimate))
        if clock is not None:
            if estimate is None:
                clock = None
            else:
                elapsed = (now - job.started_at).total_seconds() if job.started_at else 0
                clock = clock + timedelta(seconds=max(estimate - elapsed, 0))
    runs = runs_on(host)
    ahead = _Ahead(running)
    for position, job in enumerate(queued, start=1):
        estimate = estimate_seconds(job)
        waiting = Occupancy(host, runs, ahead.claims()).waiting_for(job.recipe) or ""
        entries.append(QueueEntry(job, position, clock, estimate, waiting))
        ahead.add(job)
        if clock is not None:
            clock = None if estimate is None else clock + timedelta(seconds=estimate)
    return entries


class _Ahead:
    """The jobs ahead in a host's queue as run admission's claims (one per recipe, oldest
    first), kept up as the queue is walked: no query per job."""

    def __init__(self, jobs: list[Job]):
        self.by_recipe: dict[int, list] = {}
        for job in jobs:
            self.add(job)

    def add(self, job: Job) -> None:
        entry = self.by_recipe.setdefault(job.recipe_id, [job.recipe, 0, job.queued_at])
        entry[1] += 1
        entry[2] = min(entry[2], job.queued_at)

    def claims(self) -> list[Claim]:
        found = [Claim(r, n, t, noun="benchmark job") for r, n, t in self.by_recipe.values()]
        return sorted(found, key=lambda claim: claim.since)


def queue_entry(job: Job) -> QueueEntry | None:
    """Where an active job stands in its host's queue (None once it has finished)."""
    if not job.is_active:
        return None
    if job.state != J.QUEUED:
        # Running (or preparing, cancelling): at the head, as host_queue_entries puts it,
        # without walking the whole queue on every one of the worker's progress pushes.
        return QueueEntry(job, 0, job.started_at, _estimate_seconds(job))
    return next((e for e in host_queue_entries(job.host) if e.job.pk == job.pk), None)


def host_claims(host: Host, *, ahead_of: Job | None = None) -> list[Claim]:
    """What the host's active jobs reserve it for (run admission asks, through
    apps/runs/signals.py::host_claims): one claim per recipe, oldest first. For the worker
    running `ahead_of`, only the jobs ahead of it count."""
    jobs = Job.objects.active().filter(host=host)
    if ahead_of is not None:
        job = ahead_of
        jobs = jobs.exclude(pk=job.pk).filter(
            Q(queued_at__lt=job.queued_at) | Q(queued_at=job.queued_at, pk__lt=job.pk)
        )
    # One row per recipe however long the queue (hundreds of jobs on a busy Spark).
    groups = list(
        jobs.order_by().values("recipe_id").annotate(n=Count("pk"), first=Min("queued_at"))
    )
    groups.sort(key=lambda g: g["first"])
    recipes = Recipe.objects.in_bulk([g["recipe_id"] for g in groups])
    return [
        Claim(recipes[g["recipe_id"]], g["n"], g["first"], noun="benchmark job") for g in groups
    ]


def jobs_on_run(run: Run) -> list[dict]:
    """The jobs a stop or restart of the run would interrupt or leave waiting (its confirm
    page, through apps/runs/signals.py::stop_impact): those measuring it, and those queued
    for its recipe on its host; {"pk", "user", "state", "suite"} each, oldest first."""
    jobs = (
        Job.objects.active()
        .filter(Q(run=run) | Q(run__isnull=True, host_id=run.host_id, recipe_id=run.recipe_id))
        .select_related("queued_by", "suite")
        .order_by("pk")
    )
    return [
        {
            "pk": job.pk,
            "user": job.queued_by.get_username() if job.queued_by else "someone",
            "state": job.get_state_display(),
            "suite": job.suite.name,
        }
        for job in jobs
    ]


NEVER_OVERRIDES = (
    " A benchmark job never overrides the planner: an operator can start the run from the "
    "Runs page with the typed confirmation, and a job then reuses it."
)


def queue_hints(hosts, recipes) -> list[dict]:
    """For the queue form, before anything is submitted: each host's state and, for every
    recipe, what queueing it there would meet — the words `services.job_admission` would
    refuse with (busy, image, does not fit), or what the job will do. Memory is measured
    only when a job is really queued."""
    hints = []
    for host in hosts:
        occupancy = Occupancy.of(host)
        if occupancy.active is not None:
            active = occupancy.active
            state = f"runs “{active.recipe}” ({active.get_state_display().lower()})"
            if active.pinned:
                state += ", pinned: jobs for other recipes will not replace it"
        elif occupancy.reserved:
            first = occupancy.reserved[0]
            count = first.count
            state = f"reserved for “{first.recipe}” by {count} job{'s' if count != 1 else ''}"
        else:
            state = "idle"
        if not host.online:
            state += " · no worker seen lately (jobs wait in its queue)"
        per_recipe = {str(recipe.pk): _hint(occupancy, recipe) for recipe in recipes}
        hints.append({"id": str(host.pk), "name": host.name, "state": state, "recipes": per_recipe})
    return hints


def _hint(occupancy: Occupancy, recipe: Recipe) -> dict:
    """What queueing a job for the recipe on the occupancy's host would meet."""
    host = occupancy.host
    refusal = occupancy.job_refusal(recipe.pk)
    if refusal is not None:
        return {"ok": False, "text": refusal}
    if not host.image_allowed(recipe.image):
        return {"ok": False, "text": host.image_refusal(recipe.image)}
    waiting = occupancy.waiting_for(recipe)
    reuse = occupancy.reusable(recipe.pk)
    if reuse is not None and waiting is None:
        return {"ok": True, "text": f"The job reuses run {reuse.pk} of “{recipe}” on {host.name}."}
    try:
        fit_check(recipe=recipe, host=host)
    except RunRefused as exc:
        return {"ok": False, "text": str(exc) + NEVER_OVERRIDES}
    if waiting is not None:
        return {"ok": True, "text": f"Queued, the job will be {waiting}"}
    return {"ok": True, "text": (
        f"The job starts “{recipe}” on {host.name} first (a first load can take 15 minutes "
        "on a real Spark)."
    )}  # fmt: skip


# --- a job's results ------------------------------------------------------------------


def decode_ceiling(job: Job) -> float | None:
    """The planner's single-stream decode ceiling for this recipe on this host."""
    try:
        return job.recipe.plan(job.host.spec()).decode_ceiling_tps
    except Exception:  # an incomplete architecture: no ceiling, say nothing
        return None


def speculation_of(job: Job, result: Result) -> dict:
    """What the roofline check needs of a speculative recipe: its draft length and the mean
    acceptance length — the server's own over the level (vllm:spec_decode_*), else the
    recipe's expected one (vllm_adapter/speculative.py); {} without speculative decoding."""
    spec = job.recipe.speculation
    if spec is None:
        return {}
    server = (result.metrics or {}).get("server") or {}
    measured = server.get("spec_mean_acceptance_length")
    length = measured if isinstance(measured, int | float) and measured >= 1 else None
    return {"num_speculative_tokens": spec.num_tokens,
            "mean_acceptance_length": length or spec.mean_acceptance_length}  # fmt: skip


def decode_timed(result: Result) -> bool:
    """Whether the result's decode rate is a rate (harness.decode_too_short): stored by the
    harness since it knew; older results are judged from their stored numbers."""
    stored = (result.metrics or {}).get("decode_timed")
    if stored is not None:
        return bool(stored)
    scale = (result.metrics or {}).get("time_scale") or 1.0
    seconds = harness.decode_seconds(result.output_tokens, result.decode_tps_p50)
    return not harness.decode_too_short(result.output_tokens, seconds, scale)


def client_flag(result: Result) -> str:
    """What the load generator's lag says about a level ("ok", "client lag" or "busy
    machine": harness.client_flag), the same word on the pages and in the exports. An open
    loop's stored concurrency is its cap on requests in flight, 0 for none: many streams."""
    streams = result.concurrency or (2 if result.kind == Result.Kind.RATE else 1)
    return harness.client_flag((result.metrics or {}).get("diagnostics"), streams)


def itl_from_bursts(result: Result) -> bool:
    """Whether the level's ITL figures are a lagging client's bursts (harness.itl_from_bursts)."""
    return harness.itl_from_bursts(result.metrics)


def timed_decode_tps(result: Result) -> float | None:
    """The decode rate to show, chart and credit: None when too short to time."""
    return result.decode_tps_p50 if decode_timed(result) else None


@dataclass(frozen=True)
class ScenarioRow:
    result: Result
    seed: dict | None
    roofline_percent: float | None
    roofline_message: str
    plausible: bool
    decode_timed: bool = True
    seed_notes: dict | None = None  # {figure: note} on the seed's figures for this shape
    reference_missing: bool = False  # the seed has this shape, but not for this model


def scenario_rows(job: Job) -> list[ScenarioRow]:
    ceiling = decode_ceiling(job)
    rows = []
    for result in job.results.filter(kind=Result.Kind.SCENARIO):
        percent, message, plausible = None, "", True
        timed = decode_timed(result)
        if ceiling and result.decode_tps_p50 and timed:
            check = roofline_check(result.decode_tps_p50, ceiling, **speculation_of(job, result))
            percent, message, plausible = check.percent, check.message, check.plausible
        seed = seed_for(job.recipe.model_id, result.prompt_tokens, result.output_tokens)
        rows.append(
            ScenarioRow(
                result,
                seed,
                percent,
                message,
                plausible,
                decode_timed=timed,
                seed_notes=seed_notes(result.prompt_tokens, result.output_tokens) if seed else {},
                reference_missing=seed is None
                and has_reference_shape(result.prompt_tokens, result.output_tokens),
            )
        )
    return rows


def reference_note(job: Job, rows: list[ScenarioRow]) -> str:
    """Why there is "No published reference for this model" (the page's words before it)
    where the suite's scenarios have published figures but not for this job's model; ""
    otherwise."""
    if any(r.reference_missing for r in rows):
        return reference_missing_detail(job.recipe.model_id)
    return ""


def seed_footnotes(rows: list[ScenarioRow]) -> list[dict]:
    """The notes on the seed figures shown, one per noted figure, for the table's foot."""
    labels = {"ttft_s": "TTFT", "e2e_s": "total", "prefill_tps": "prefill tok/s",
              "decode_tps": "decode tok/s"}  # fmt: skip
    out = []
    for row in rows:
        for field_name, note in (row.seed_notes or {}).items():
            shape = f"{row.result.prompt_tokens}/{row.result.output_tokens}"
            figure = f"{row.seed[field_name]:g}" if row.seed else ""
            out.append({"shape": shape, "figure": labels.get(field_name, field_name),
                        "value": figure, "note": note})  # fmt: skip
    return out


def suites_of(jobs: list[Job]) -> dict:
    """Which suite each compared job measured, and whether they differ: capacity answers
    depend on the suite's sweep and SLO. Suites differ by name or, for one name, by what
    they measure (a suite edited between the jobs: each job keeps its queued copy)."""

    def measured(plan: dict) -> dict:
        return {k: v for k, v in (plan or {}).items() if k not in ("name", "suite_id")}

    names = [(job.plan or {}).get("name") or str(job.suite) for job in jobs]
    plans = [measured(job.plan) for job in jobs]
    same_name = len(set(names)) == 1
    same_plan = all(p == plans[0] for p in plans)
    warning = ""
    if not same_name:
        warning = (
            "These jobs used different suites ("
            + ", ".join(f"job {j.pk}: {n}" for j, n in zip(jobs, names, strict=True))
            + "): their scenarios, sweeps and SLOs can differ, and capacity answers depend on "
            "them. Compare like with like."
        )
    elif not same_plan:
        warning = (
            f"These jobs used different versions of the suite “{names[0]}” (it was edited "
            "between them): their scenarios, sweeps or SLOs differ, and capacity answers "
            "depend on them."
        )
    return {"names": names, "differ": bool(warning), "warning": warning}


def sweep_results(job: Job) -> list[Result]:
    """The sweep's levels, each with `decode_timed`, `client_flag` (what the load
    generator's lag says: "ok", "client lag" or "busy machine") and `itl_from_bursts` for
    the pages."""
    levels = list(job.results.filter(kind=Result.Kind.SWEEP).order_by("concurrency"))
    for r in levels:
        r.decode_timed = decode_timed(r)
        r.client_flag, r.itl_from_bursts = client_flag(r), itl_from_bursts(r)
    return levels


def capacity_answer(job: Job) -> dict | None:
    """The largest measured concurrency whose TTFT p95 and per-user decode rate meet the
    suite's SLO: "serves N concurrent users with TTFT p95 ≤ X s and ≥ Y tok/s each"."""
    slo = job.plan.get("slo") or {}
    levels = [r for r in sweep_results(job) if r.ok and r.ttft_p95_s is not None]
    if not slo or not levels:
        return None
    min_tps = 1 / slo["tpot_s"]
    # A level whose decode is too short to time earns no credit: its rate is noise.
    timed = [r for r in levels if decode_timed(r)]
    meeting = [
        r for r in timed if r.ttft_p95_s <= slo["ttft_s"] and (r.decode_tps_p50 or 0) >= min_tps
    ]
    best = max(meeting, key=lambda r: r.concurrency) if meeting else None
    answer = {
        "slo_ttft_s": slo["ttft_s"],
        "slo_tps": round(min_tps, 1),
        "users": best.concurrency if best else 0,
        "ttft_p95_s": best.ttft_p95_s if best else None,
        "decode_tps_p50": best.decode_tps_p50 if best else None,
        "tested_up_to": max(r.concurrency for r in levels),
        "shape": sweep_shape(job.plan),
    }
    # the team workload: people holding conversations, not lone requests
    of = f" in {answer['shape']}" if (job.plan or {}).get("sessions") else ""
    if best:
        answer["text"] = (
            f"This recipe serves {best.concurrency} concurrent user"
            f"{'s' if best.concurrency != 1 else ''}{of} with TTFT p95 ≤ {slo['ttft_s']:g} s and "
            f"≥ {min_tps:.0f} tok/s each (measured {best.ttft_p95_s:.2f} s and "
            f"{best.decode_tps_p50:.1f} tok/s at {best.concurrency})."
        )
    elif not timed:
        answer["text"] = (
            f"No capacity answer: the sweep's {job.plan['sweep']['output_tokens']}-token "
            "generations are too short to time a per-user decode rate."
        )
    else:
        answer["text"] = (
            f"No measured level meets TTFT p95 ≤ {slo['ttft_s']:g} s with ≥ {min_tps:.0f} tok/s "
            "per user."
        )
    answer["untimed_levels"] = len(levels) - len(timed)
    answer["timed_levels"] = len(timed)
    # The levels that decided the answer: the best one, and the first above it that missed
    # (or the lowest, when none met). Where their load generator lagged, the server was not
    # what the answer measured, and the headline says so.
    above = [
        r for r in timed if r not in meeting and (best is None or r.concurrency > best.concurrency)
    ]
    deciding = ([best] if best else []) + sorted(above, key=lambda r: r.concurrency)[:1]
    flagged = next((r for r in deciding if r.client_flag != "ok"), None)
    answer["client_limited"] = flagged.client_flag if flagged else ""
    if flagged:
        answer["text"] += (
            f" The level at {flagged.concurrency} is flagged “{flagged.client_flag}”: the load "
            "generator, not the server, may have been the bottleneck, so the server may serve "
            "more."
        )
    return answer


def kv_observation(job: Job) -> dict | None:
    """The seeds' "KV under 5 % for one user, under 30 % for small batches" checked on
    this job's levels (the server's KV usage, sampled while each level ran)."""
    single, small = [], []
    for r in job.results.all():
        peak = ((r.metrics or {}).get("server") or {}).get("kv_usage_peak")
        if peak is None:
            continue
        if r.kind == Result.Kind.SCENARIO or (r.kind == Result.Kind.SWEEP and r.concurrency == 1):
            single.append(peak)
        elif r.kind == Result.Kind.SWEEP and r.concurrency <= reference.SMALL_BATCH:
            small.append(peak)
    return reference.kv_check(single, small)


def summary_of(answer: dict | None) -> dict:
    """A job's stored summary (and the webhook's): the capacity answer in two fields."""
    return {
        "capacity_users": answer["users"] if answer else None,
        "capacity_text": answer["text"] if answer else "",
    }


def scenario_chart(job: Job) -> dict:
    rows = scenario_rows(job)
    labels = [f"{r.result.prompt_tokens}/{r.result.output_tokens}" for r in rows]

    def series(metric: str, attr: str) -> list[dict]:
        out = [{"label": "measured", "values": [getattr(r.result, attr) for r in rows]}]
        if any(r.seed for r in rows):
            out.append(
                {
                    "label": f"seed ({SEED_SOURCE})",
                    "values": [r.seed.get(metric) if r.seed else None for r in rows],
                }
            )
        return out

    decode_series = series("decode_tps", "decode_tps_p50")
    # Too short to time: no measured point (the seed's published figure stays).
    decode_series[0]["values"] = [timed_decode_tps(r.result) for r in rows]
    decode_series[0]["notes"] = [None if r.decode_timed else "too short to time" for r in rows]
    return {
        "scenarios": labels,
        "metrics": {
            "ttft_s": {"unit": "s", "series": series("ttft_s", "ttft_p50_s")},
            "decode_tps": {"unit": "tok/s", "series": decode_series},
        },
    }


def curve_series(job: Job) -> dict:
    return {
        "label": f"job {job.pk} ({job.recipe.name}, {job.host.name})",
        "points": [
            {"concurrency": r.concurrency, "x": r.decode_tps_p50, "y": r.output_tps}
            for r in sweep_results(job)
            if timed_decode_tps(r) is not None and r.output_tps is not None
        ],
    }


def curve_chart(jobs: list[Job]) -> dict:
    return {
        "series": [curve_series(job) for job in jobs],
        "x_label": "per-user decode tok/s (p50)",
        "y_label": "aggregate output tok/s",
    }


def ttft_chart(jobs: list[Job]) -> dict:
    levels = sorted({r.concurrency for job in jobs for r in sweep_results(job)})
    series = []
    for job in jobs:
        by_level = {r.concurrency: r for r in sweep_results(job)}
        prefix = f"job {job.pk} " if len(jobs) > 1 else ""
        for label, attr in (("TTFT p50", "ttft_p50_s"), ("TTFT p99", "ttft_p99_s")):
            series.append(
                {
                    "label": prefix + label,
                    "values": [
                        getattr(by_level[c], attr) if c in by_level else None for c in levels
                    ],
                }
            )
    return {"x": levels, "x_label": "concurrent requests", "series": series, "unit": "s"}


# Keys follow `vllm bench serve`'s result names where the meaning matches.
EXPORT_FIELDS = [
    ("job", lambda j, r: j.pk),
    ("kind", lambda j, r: r.kind),
    ("scenario", lambda j, r: r.scenario),
    ("input_len", lambda j, r: r.prompt_tokens),
    ("output_len", lambda j, r: r.output_tokens),
    ("max_concurrency", lambda j, r: r.concurrency),
    # as `vllm bench serve` writes it: "inf" when requests are not paced (a closed loop)
    ("request_rate", lambda j, r: r.request_rate if r.request_rate is not None else "inf"),
    # Two flags, two causes (docs/benchmarks.md, "Flags"): `saturated`, a rate level whose
    # backlog grew without bound (the server fell behind); `client_flag`, the load
    # generator's own lag ("ok", "client lag", "busy machine"), as the job page says it.
    ("saturated", lambda j, r: bool((r.metrics or {}).get("saturated"))),
    ("client_flag", lambda j, r: client_flag(r)),
    ("completed", lambda j, r: r.ok),
    ("failed", lambda j, r: r.failed),
    ("complete", lambda j, r: r.complete),
    ("request_throughput", lambda j, r: r.request_rps),
    ("output_throughput", lambda j, r: r.output_tps),
    ("request_goodput", lambda j, r: r.goodput_rps),
    ("median_ttft_ms", lambda j, r: _ms(r.ttft_p50_s)),
    ("p95_ttft_ms", lambda j, r: _ms(r.ttft_p95_s)),
    ("p99_ttft_ms", lambda j, r: _ms(r.ttft_p99_s)),
    ("median_e2el_ms", lambda j, r: _ms(r.e2e_p50_s)),
    ("median_decode_tok_s", lambda j, r: r.decode_tps_p50),
    # False: too short to time (harness.decode_too_short); the median above is then noise.
    ("decode_timed", lambda j, r: decode_timed(r)),
    ("median_prefill_tok_s", lambda j, r: r.prefill_tps_p50),
    ("median_tpot_ms", lambda j, r: _ms(r.metrics.get("tpot", {}).get("p50"))),
    ("median_itl_ms", lambda j, r: _ms(r.metrics.get("itl", {}).get("p50"))),
    # True: the ITL figures (above, and the metrics' "itl") are bursts a lagging client
    # read at once, not the server's pace (harness.itl_from_bursts); TPOT still holds.
    ("itl_from_bursts", lambda j, r: itl_from_bursts(r)),
    ("kv_cache_usage_peak", lambda j, r: (r.metrics.get("server") or {}).get("kv_usage_peak")),
    ("recipe", lambda j, r: j.recipe.name),
    ("model_id", lambda j, r: j.recipe.model_id),
    ("image", lambda j, r: j.context.get("image", "")),
    ("image_digest", lambda j, r: j.image_digest),
    ("host", lambda j, r: j.host.name),
    ("simulated", lambda j, r: j.context.get("simulated", False)),
]


def _ms(seconds):
    return None if seconds is None else round(seconds * 1000, 3)


def export_rows(jobs: list[Job]) -> list[dict]:
    return [
        {key: get(job, result) for key, get in EXPORT_FIELDS}
        for job in jobs
        for result in job.results.all()
    ]


def export_csv(jobs: list[Job]) -> str:
    """The results as CSV; text cells that a spreadsheet would run as a formula are
    neutralised (apps/core/csvsafe.py)."""
    return csv_text([key for key, _ in EXPORT_FIELDS], export_rows(jobs))


def export_json(job: Job) -> dict:
    return {
        "job": job.pk,
        "state": job.state,
        "suite": job.plan,
        "recipe": {"name": job.recipe.name, "model_id": job.recipe.model_id},
        "host": job.host.name,
        "context": job.context,
        "queued_at": job.queued_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "error": job.error,
        "capacity": capacity_answer(job),
        "decode_ceiling_tps": decode_ceiling(job),
        "results": [
            {key: get(job, result) for key, get in EXPORT_FIELDS} | {"metrics": result.metrics}
            for result in job.results.all()
        ],
    }

"""What a Spark's worker does for a benchmark job: make sure the recipe is being served,
run the suite level by level with the harness, store each level as it finishes, and push
progress to open pages. The Celery task calls `run_job`; tests can call it directly."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import httpx
from django.db import close_old_connections, connection
from django.utils import timezone

from apps.benchmarks import harness
from apps.benchmarks.harness.types import SLO, LevelSpec
from apps.benchmarks.lifecycle import finish, finish_cancelled, interrupt
from apps.benchmarks.live import push_progress
from apps.benchmarks.models import WORKING_JOB_STATES, J, Job, Result
from apps.benchmarks.plans import plan_levels, plan_refusal
from apps.core.tls import client_context
from apps.hosts.clock import run_clock
from apps.runs import runner as run_runner
from apps.runs.colocation import runs_on
from apps.runs.models import STARTING_STATES, Run, RunState
from apps.runs.services import RunRefused, run_create, run_stop
from vllm_adapter import endpoints

log = logging.getLogger(__name__)
MONITOR_EVERY_S = 0.5
# A swap waits this long for a run on another queue (a pair's head) to stop.
SWAP_STOP_WAIT_S = 600
SWAP_POLL_S = 0.5
# ...and this long for the stopped server's memory to show as free before its start.
SWAP_MEMORY_WAIT_S = 60
MEMORY_REFUSALS = {"not_enough_memory", "memory_unknown"}


class JobFailed(Exception):
    pass


def run_job(job_id: int) -> None:
    job = Job.objects.select_related("recipe", "host", "suite").get(pk=job_id)
    if job.state in WORKING_JOB_STATES:
        # Delivered again: the worker that had it died mid-job. Never run it twice.
        interrupt(job)
        return
    if job.state != J.QUEUED or not job.move(J.QUEUED, J.PREPARING, started_at=timezone.now()):
        return  # cancelled (or already handled)
    _progress(job, step="Preparing the model")
    push_progress(job)
    try:
        check_plan(job)
        run = _ensure_run(job)
        clock = run_clock(run)  # the harness times in the host's clock (apps/hosts/clock.py)
        context = {
            "run": run.pk,
            "image": run.image,
            "image_digest": run.image_digest,
            "image_pinned": run.image_pinned,
            "argv": run.argv,
            "host": job.host.name,
            "simulated": clock.simulated,
            "time_scale": clock.scale,
            "recipe": job.recipe.name,
            "model_id": job.recipe.model_id,
            "server_version": _server_version(run),
        }
        if not job.move(
            J.PREPARING, J.RUNNING, run=run, context=context, image_digest=run.image_digest
        ):
            finish_cancelled(job)
            return
        push_progress(job)
        stopped = _measure(job, run)
    except JobFailed as exc:
        finish(job, J.FAILED, error=str(exc))
        return
    except Exception as exc:  # never leave a job "running" forever
        log.exception("benchmark job %s crashed", job.pk)
        finish(job, J.FAILED, error=f"the job crashed: {type(exc).__name__}: {exc}")
        return
    if stopped:
        finish_cancelled(job)
    else:
        finish(job, J.DONE)


def _ensure_run(job: Job) -> Run:
    """A ready run of the recipe on the host, reused; every run of another recipe there is
    swapped out first, as the job takes the Spark alone (`_swap_out`; a pinned one fails
    the job); else start one here (on the host's queue, so it cannot wait for a start
    task queued behind this job). Run admission applies to the start, memory included,
    once the host is free."""
    runs = runs_on(job.host)
    active = next((r for r in runs if r.recipe_id == job.recipe_id
                   and r.state != RunState.STOPPING), None)  # fmt: skip
    # The job takes the Spark alone: models beside its recipe's run share its bandwidth.
    others = [r for r in runs if r is not active]
    swapped = bool(others)
    for other in others:
        _swap_out(job, other)
    if active is not None and active.state == RunState.READY:
        _progress(job, step=f"Reusing the ready run {active.pk}")
        return active
    if active is None:
        active = _create_run(job, swapped=swapped)
        _progress(job, step=f"Starting run {active.pk} (a first load can take 15 minutes)")
    else:
        _progress(job, step=f"Waiting for run {active.pk} to be ready")
    push_progress(job)
    if active.state in STARTING_STATES:
        run_runner.start(active.pk)  # idempotent: adopts a server already starting
    active.refresh_from_db()
    if active.state != RunState.READY:
        reason = active.failure_reason or f"it is {active.get_state_display().lower()}"
        raise JobFailed(f"run {active.pk} did not become ready: {reason}")
    return active


def _swap_out(job: Job, active: Run) -> None:
    """The job's turn has come and the host serves another recipe (or a run that is
    stopping): stop that run the way an operator's stop does, with the reason kept on it,
    and wait until it is stopped. A run pinned meanwhile is left alone and the job fails
    (queue it again once an operator unpins the run). Chat users of the run lose it too:
    pinning is how an operator protects a run."""
    reason = f"stopped to run benchmark job {job.pk}"
    # This queue is the run's host's: stop it here (a stop task would wait behind this
    # job). A pair run this Spark is the worker of lives on its head's queue.
    here = active.host_id == job.host_id
    try:
        active = run_stop(run=active, reason=reason, unless_pinned=True, here=here)
    except RunRefused as exc:
        raise JobFailed(f"Not run: {exc}") from None
    _progress(job, step=f"Stopping run {active.pk} (“{active.recipe}”) to start “{job.recipe}”")
    push_progress(job)
    if here:
        run_runner.stop(active.pk)
    deadline = time.monotonic() + SWAP_STOP_WAIT_S
    while Run.objects.active().filter(pk=active.pk).exists():
        if time.monotonic() > deadline:
            raise JobFailed(
                f"run {active.pk} on {active.host.name} did not stop within "
                f"{SWAP_STOP_WAIT_S // 60} minutes, so “{job.recipe}” was not started."
            )
        time.sleep(SWAP_POLL_S)


def _create_run(job: Job, *, swapped: bool) -> Run:
    """Admit and create the job's run. Right after a swap the stopped server's memory can
    take a moment to show as free (the host agent measures it on the Spark twice a
    second): a refusal for memory is asked again, with the host read afresh, for up to
    SWAP_MEMORY_WAIT_S before the job fails with it."""
    deadline = time.monotonic() + (SWAP_MEMORY_WAIT_S if swapped else 0)
    while True:
        if swapped:
            job.host.refresh_from_db()  # the agent's sample from before the stop is stale
        try:
            return run_create(recipe=job.recipe, host=job.host, user=job.queued_by, job=job)
        except RunRefused as exc:
            if exc.code not in MEMORY_REFUSALS or time.monotonic() >= deadline:
                raise JobFailed(f"could not start the recipe: {exc}") from None
            step = f"Waiting for {job.host.name}'s memory to be given back: {exc}"
        if job.progress.get("step") != step[:200]:
            _progress(job, step=step[:200])
            push_progress(job)
        time.sleep(SWAP_POLL_S)


def _server_version(run: Run) -> str:
    try:
        url = endpoints.url(run.local_endpoint, endpoints.VERSION)
        response = httpx.get(url, headers=run.upstream_headers, timeout=5, verify=client_context())
        return endpoints.server_version(response.json())
    except (httpx.HTTPError, ValueError, AttributeError):
        return ""


def _levels(job: Job, run: Run) -> list[tuple[str, LevelSpec]]:
    return plan_levels(job.plan, job.recipe.sequences)


def check_plan(job: Job) -> None:
    """The queue refuses a suite its recipe cannot run; a job queued before that check
    (or whose recipe changed since) fails here, before a run is started or a prompt built."""
    refusal = plan_refusal(
        job.plan, max_num_seqs=job.recipe.sequences, max_model_len=job.recipe.context_tokens
    )
    if refusal is not None:
        raise JobFailed(f"Not run: {refusal}")


class _Monitor(threading.Thread):
    """Beside the event loop: watches for a cancel and saves/pushes progress twice a second
    (the ORM stays out of the harness's loop)."""

    def __init__(self, job: Job):
        super().__init__(daemon=True, name=f"job-{job.pk}-monitor")
        self.job = job
        self.cancel = threading.Event()
        self.done = threading.Event()
        self.progress: dict = dict(job.progress)
        self.dirty = False
        self.lock = threading.Lock()

    def update(self, **values) -> None:
        with self.lock:
            self.progress.update(values)
            self.dirty = True

    def run(self) -> None:
        try:
            while not self.done.wait(MONITOR_EVERY_S):
                self.tick()
            self.tick()
        finally:
            connection.close()

    def tick(self) -> None:
        state = Job.objects.filter(pk=self.job.pk).values_list("state", flat=True).first()
        if state != J.RUNNING:
            self.cancel.set()
        with self.lock:
            if not self.dirty:
                return
            progress, self.dirty = dict(self.progress), False
        Job.objects.filter(pk=self.job.pk).update(progress=progress)
        self.job.progress = progress
        self.job.state = state or self.job.state
        push_progress(self.job, progress_only=True)


def _measure(job: Job, run: Run) -> bool:
    """Run every level; returns True when a cancel stopped it early."""
    plan = job.plan
    slo = SLO(plan["slo"]["ttft_s"], plan["slo"]["tpot_s"])
    scale = job.context["time_scale"]
    levels = _levels(job, run)
    total = sum(spec.requests + spec.warmup for _, spec in levels)
    base_url, model = run.local_endpoint, run.served_name  # no ORM in the loop
    api_key = run.api_key
    monitor = _Monitor(job)
    monitor.update(step="Running", done=0, total=total, percent=0)
    monitor.start()
    finished_before = 0
    try:
        for kind, spec in levels:
            if monitor.cancel.is_set():
                return True
            label = _label(kind, spec)

            def on_progress(done: int, _total: int, base=finished_before, label=label) -> None:
                monitor.update(
                    done=base + done,
                    percent=round(100 * (base + done) / total, 1),
                    level=label,
                    step=f"Measuring {label}",
                )

            monitor.update(level=label, step=f"Measuring {label}")
            server = (base_url, model, api_key)
            level = _run_level(server, spec, slo, scale, on_progress, monitor.cancel.is_set)
            result = _run_loop(level)
            finished_before += spec.requests + spec.warmup
            if result.error:
                raise JobFailed(f"{label}: {result.error}")
            # Interrupted behind our back (the memory watchdog killed the model, or a
            # reaper): the level in flight is kept, marked as cut short, and nothing more runs.
            interrupted = Job.objects.filter(pk=job.pk, state=J.INTERRUPTED).exists()
            if result.sent:
                _store(job, kind, result, cut_short=interrupted)
                job.refresh_from_db(fields=["progress"])
                push_progress(job, results=True)
            if result.stopped or interrupted:
                return True
            if result.saturated:  # a higher rate would only saturate sooner: not run
                break
    finally:
        monitor.done.set()
        monitor.join(timeout=10)
        close_old_connections()
    return False


def _label(kind: str, spec: LevelSpec) -> str:
    if kind == Result.Kind.SCENARIO:
        return f"{spec.scenario.prompt_tokens}/{spec.scenario.output_tokens}, single stream"
    if spec.arrivals is not None:
        return f"rate {spec.arrivals.rate:g} req/s"
    return f"sweep at {spec.concurrency} concurrent"


def _run_loop(coro):
    """uvloop when installed: it halves the client's timing error at 64 streams
    (docs/BENCHMARKS.md); plain asyncio otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


async def _run_level(server, spec, slo, scale, on_progress, should_stop):
    base_url, model, api_key = server
    async with await harness.Client.create(
        base_url, model=model, api_key=api_key or None,
        max_connections=_connections(spec),
    ) as client:  # fmt: skip
        return await harness.run_level(
            client, spec, slo, time_scale=scale, on_progress=on_progress, should_stop=should_stop
        )


def _connections(spec: LevelSpec) -> int:
    """Closed loop: twice the streams. Open loop: the cap, or the client's most (1,024)
    when there is none (beyond it a due request waits for a connection: its lag shows)."""
    if spec.arrivals is not None:
        return max(64, spec.arrivals.max_concurrency or 1024)
    return max(64, spec.concurrency * 2)


def _p95(values: list[float]) -> float | None:
    return harness.percentiles(values, (95,))["p95"]


def _store(job: Job, kind: str, level: harness.LevelResult, cut_short: bool = False) -> Result:
    spec = level.spec
    metrics = level.to_dict()
    metrics.pop("requests", None)
    # A dataset level's lengths are its sample's means (the scenario's are only bounds).
    lengths = level.dataset
    return Result.objects.create(
        job=job,
        kind=kind,
        scenario=spec.scenario.name,
        prompt_tokens=round(lengths.get("prompt_tokens_mean") or spec.scenario.prompt_tokens),
        output_tokens=round(lengths.get("output_tokens_mean") or spec.scenario.output_tokens),
        concurrency=(spec.arrivals.max_concurrency or 0) if spec.arrivals else spec.concurrency,
        request_rate=spec.arrivals.rate if spec.arrivals else None,
        ok=level.ok,
        failed=level.failed,
        complete=not (cut_short or level.stopped or level.saturated)
        and level.sent == spec.requests,
        ttft_p50_s=level.ttft.get("p50"),
        ttft_p95_s=_p95([r["ttft"] for r in level.requests if r["ok"] and r["ttft"] is not None]),
        ttft_p99_s=level.ttft.get("p99"),
        e2e_p50_s=level.e2e.get("p50"),
        decode_tps_p50=level.decode_tok_s.get("p50"),
        prefill_tps_p50=level.prefill_tok_s.get("p50"),
        output_tps=level.output_throughput,
        request_rps=level.request_throughput,
        goodput_rps=level.goodput,
        metrics=metrics,
        requests=level.requests,
    )


def _progress(job: Job, **values) -> None:
    job.progress = {**job.progress, **values}
    Job.objects.filter(pk=job.pk).update(progress=job.progress)

"""The host agent: one long-running process per Spark (`manage.py hostagent --host NAME`),
independent of the Celery queue, so it keeps watching while a worker is busy loading a
model for 15 minutes.

Twice a second it reads the host's memory and feeds the watchdog — ten times a second while
a run's server starts (loading, profiling, compiling, warming: when memory jumps), and
with the forecast on (the time to its next poll as the horizon, PSI pressure where the
host has it: apps/guard/watchdog.py); once a second it scrapes
the `/metrics` of each active run (a Spark may serve several side by side: `Host.max_runs`),
derives rates and quantiles per run, publishes a sample to the Channels groups
`host-<name>` (the host's memory and every run's numbers) and `run-<id>` (the host's
memory and that run's), and records its heartbeat; every 10 s it stores a downsampled row
per run. On the watchdog's "act" it kills one run's server at once — with several, the
least important (apps/guard/victim.py; the next polls decide again) — records an incident
with the last minute of memory and pushes a banner to every browser.

Every step is guarded: an error is logged, shown on the host (agent_error) and pushed as
an alert, and the loop goes on — the watchdog never dies silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import statistics
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers
from django.conf import settings
from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from apps.audit import context as audit_context
from apps.audit import services as audit
from apps.benchmarks import lifecycle
from apps.benchmarks.models import WORKING_JOB_STATES, J, Job
from apps.core.tls import client_context
from apps.gateway import catalog
from apps.gateway.models import OnDemand
from apps.guard import live
from apps.guard.conditions import CLEAR_S, Episode, RunConditions
from apps.guard.hang import STALL_S, Hang, HangDetector, prefill_allowance_s
from apps.guard.hostmem import NvidiaSmiError, gpu_processes, read_psi
from apps.guard.victim import Candidate, Choice, choose
from apps.guard.watchdog import ACT, GIB, OK, WARN, Decision, Watchdog
from apps.hosts.clock import run_clock
from apps.hosts.engines import EngineError, Handle, engine_for
from apps.hosts.models import Host
from apps.recipes.models import HangPolicy
from apps.runs import colocation, pair
from apps.runs.models import Run, RunState
from apps.runs.services import run_restart
from apps.telemetry.groups import host_group, run_group
from apps.telemetry.models import HostSample, Incident
from apps.telemetry.signals import incident_recorded
from sparkdomain import options
from sparkdomain.meminfo import MeminfoError
from vllm_adapter import endpoints
from vllm_adapter import metrics as scrape

log = logging.getLogger("sparkpanel.hostagent")

MEM_INTERVAL_S = 0.5
STARTING_MEM_INTERVAL_S = 0.1  # while a run's server starts: vLLM's profiling jumps fast
SCRAPE_INTERVAL_S = 1.0
BUCKET_S = 10.0
SCRAPE_TIMEOUT_S = 0.8
SCRAPE_MAX_BYTES = 2_000_000
PRUNE_EVERY_S = 3600.0
GPU_EVERY_S = 5.0
DISK_EVERY_S = 60.0
SCHEDULE_SLACK_S = 0.1
# After the watchdog stopped one of several runs: the killed server's memory comes back
# within this long; low readings after it stop the next one (Watchdog.rearm).
REARM_SETTLE_S = 2.0
IDLE_LOOKUP_S = 0.5  # at most this long to read the runs' idle clocks before a kill
SCRAPE_THREADS = 4  # the runs of one Spark are scraped at once (Host.max_runs is 4 at most)
SCRAPED_STATES = (RunState.WARMING, RunState.READY, RunState.STOPPING)
# The phases in which the model server takes its memory (the fast polls).
LOADING_STATES = (RunState.STARTING, RunState.LOADING, RunState.COMPILING, RunState.WARMING)
SAMPLE_EVENT = "telemetry.sample"
AVERAGED = (
    "kv_usage_pct", "running", "waiting", "prompt_tps", "generation_tps", "ttft_p50",
    "ttft_p95", "itl_p50", "itl_p95", "prefix_hit_rate", "preemptions",
    "spec_acceptance_rate", "spec_acceptance_length",
)  # fmt: skip


@dataclass
class _Bucket:
    """One run's 10-second bucket (or the host's, run None, while no run is active): the
    host's memory and that run's numbers."""

    started: float
    run_id: int | None = None
    mem_total: int | None = None
    mem_available: list[int] = field(default_factory=list)
    psi: list[float] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, sample: dict) -> None:
        self.run_id = sample.get("run") or self.run_id
        if sample.get("mem_total") is not None:
            self.mem_total = sample["mem_total"]
        if sample.get("mem_available") is not None:
            self.mem_available.append(sample["mem_available"])
        if sample.get("psi_some_avg10") is not None:
            self.psi.append(sample["psi_some_avg10"])
        for key in AVERAGED:
            if sample.get(key) is not None:
                self.values.setdefault(key, []).append(sample[key])

    def row(self, host: Host) -> HostSample:
        mean = {key: statistics.fmean(v) for key, v in self.values.items() if v}
        return HostSample(
            host=host, run_id=self.run_id,
            at=datetime.fromtimestamp(self.started, UTC),
            mem_total=self.mem_total,
            mem_available=min(self.mem_available) if self.mem_available else None,
            psi_some_avg10=statistics.fmean(self.psi) if self.psi else None,
            **mean,
        )  # fmt: skip


class HostAgent:
    def __init__(
        self,
        host_name: str,
        *,
        mem_interval: float = MEM_INTERVAL_S,
        starting_mem_interval: float = STARTING_MEM_INTERVAL_S,
        scrape_interval: float = SCRAPE_INTERVAL_S,
        forecast: bool = True,
        bucket_s: float = BUCKET_S,
        clock=time.time,
    ):
        self.host_name = host_name
        self.mem_interval = mem_interval
        self.starting_mem_interval = min(starting_mem_interval, mem_interval)
        self.forecast = forecast
        self.run_loading = False  # a run's server is starting here (from the last scrape)
        self.scrape_interval = scrape_interval
        self.bucket_s = bucket_s
        self.clock = clock
        self.host = Host.objects.get(name=host_name)
        self.watchdog = self._watchdog()
        # Per active run (keyed by its pk; dropped once it is no longer scraped/active).
        self.derivers: dict[int, scrape.Deriver] = {}
        self.hang_detectors: dict[int, HangDetector] = {}
        self.run_conditions: dict[int, RunConditions] = {}
        self.memory: tuple[int | None, int | None, str] = (None, None, "")
        self.psi: float | None = None
        self.last_decision: Decision | None = None
        # The buckets of the current 10 s: one per run (None: the host's, no run active).
        self.buckets: dict[int | None, _Bucket] = {}
        self.bucket_started: float | None = None
        self.next_scrape = 0.0
        self._last_poll = 0.0
        self.next_prune = 0.0
        self.next_gpu = 0.0
        self.gpu: list[dict] | None = None
        self.errors: dict[str, str] = {}
        self.stopped_runs: list[int] = []
        self.disk = Episode(0.0, CLEAR_S)
        self.next_disk = 0.0
        self.last_choice: Choice | None = None  # the watchdog's last choice among runs
        self.scraper = ThreadPoolExecutor(SCRAPE_THREADS, thread_name_prefix="hostagent-scrape")
        # Its own layer instance, used only from its own loop below.
        self.layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        # One event loop for the agent's whole life: channels_redis keeps its connection
        # pool per loop, so publishing through a fresh loop each time (async_to_sync) would
        # open a new Redis connection per sample (~8 ms each).
        self.loop = asyncio.new_event_loop()

    def _watchdog(self) -> Watchdog:
        return Watchdog(
            warn_bytes=int(self.host.watchdog_warn_gib * GIB),
            act_bytes=int(self.host.watchdog_act_gib * GIB),
        )

    # --- the loop ------------------------------------------------------------------------

    def run_forever(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        log.info("host agent for %s: memory every %.2f s (%.2f s while a server starts), "
                 "metrics every %.1f s, forecast %s", self.host_name, self.mem_interval,
                 self.starting_mem_interval, self.scrape_interval,
                 "on" if self.forecast else "off")  # fmt: skip
        try:
            while not stop.is_set():
                started = time.monotonic()
                self.step()
                stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            self.close()

    @property
    def interval(self) -> float:
        """Seconds to the next memory poll: shorter while a run's server starts."""
        return self.starting_mem_interval if self.run_loading else self.mem_interval

    def close(self) -> None:
        """Close the agent's Redis connections and its event loop."""
        if self.loop.is_closed():
            return
        self.scraper.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(self.layer.close_pools())
        self.loop.close()

    def step(self) -> None:
        """One memory poll, plus a scrape and a heartbeat when one is due. Never raises."""
        close_old_connections()
        now = self.clock()
        self._guard("memory", self.poll_memory, now)
        # Due with a little slack: polls jitter, and a poll a few ms early must not push the
        # scrape a whole poll later (a 1.5 s gap in a 1 Hz series).
        if now >= self.next_scrape - SCHEDULE_SLACK_S:
            self.next_scrape = max(self.next_scrape + self.scrape_interval, now)
            self._guard("metrics", self.scrape_and_publish, now)
        if now >= self.next_prune:
            self.next_prune = now + PRUNE_EVERY_S
            self._guard("history", self.prune, now)
        if now >= self.next_disk:
            self.next_disk = now + DISK_EVERY_S
            self._guard("disk", self.watch_disk, now)

    def _guard(self, what: str, fn, *args) -> None:
        try:
            fn(*args)
            if self.errors.pop(what, None) is not None:
                log.info("%s works again", what)
        except Exception as exc:  # the watchdog must outlive any one failure
            text = f"{what}: {type(exc).__name__}: {exc}"[:300]
            if self.errors.get(what) != text:
                log.exception("host agent step failed (%s)", what)
            self.errors[what] = text

    # --- memory and the watchdog ----------------------------------------------------------

    def poll_memory(self, now: float) -> None:
        try:
            memory = self.host.memory()
            self.memory = (memory.total_bytes, memory.available_bytes, "")
        except MeminfoError as exc:
            self.memory = (None, None, str(exc))
        if not self.host.simulated:
            try:
                psi = read_psi()
                self.psi = psi.some.avg10 if psi else None
            except MeminfoError:
                self.psi = None
        previous_poll = self._last_poll
        now = self._last_poll = max(now, self._last_poll)  # a wall clock can step back
        # The forecast looks one poll ahead: the interval, or the last gap between polls
        # when they run late (a thrashing host delays the next one too), up to twice it.
        interval = self.interval
        late = now - previous_poll if previous_poll else 0.0
        horizon = min(max(interval, late), 2 * interval)
        decision = self.watchdog.observe(
            self.memory[1],
            now,
            error=self.memory[2] or None,
            horizon_s=horizon if self.forecast else None,
            pressure_pct=self.psi,
        )
        previous, self.last_decision = self.last_decision, decision
        if decision.unknown and (previous is None or not previous.unknown):
            self._incident(Incident.Kind.ALERT, decision.message, None)
            self._banner("alert", decision.message)
        if decision.stop_run:
            self.act(decision)
        elif decision.changed and decision.level == WARN:
            self._incident(Incident.Kind.WARN, decision.message, self._active_run())
            self._banner(WARN, decision.message)
        elif decision.changed and decision.level == OK:
            self._banner(OK, decision.message)

    def _active_runs(self) -> list[Run]:
        """Every active run that uses this Spark (its own, and a pair run it is the worker
        of), oldest first."""
        return colocation.runs_on(self.host)

    def _active_run(self) -> Run | None:
        runs = self._active_runs()
        return runs[0] if runs else None

    def act(self, decision: Decision) -> None:
        """Stop one run now: the machine is about to freeze. With several runs on the Spark,
        the least important one (apps/guard/victim.py); the next polls decide again."""
        runs = self._active_runs()
        pair_run = next((r for r in runs if r.is_pair), None)
        choice: Choice | None = None
        candidates: list[Candidate] = []
        if pair_run is not None:  # it holds both its Sparks alone
            run: Run | None = pair_run
            action = self._act_on_pair(pair_run, decision)
        else:
            # One run: that one (no look-ups to wait for while the memory runs out).
            candidates = self._candidates(runs) if len(runs) > 1 else [_bare(r) for r in runs]
            choice = self.last_choice = choose(candidates)
            run = next((r for r in runs if choice and r.pk == choice.victim.run_id), None)
            action = "no run was active: nothing to stop (something else is using the memory)"
            if run is not None:
                action = self._kill(run, decision, choice, len(runs))
        log.warning("WATCHDOG %s: %s — %s", self.host_name, decision.message, action)
        if run is not None:
            audit.record("run.kill", run, actor=audit_context.Actor(source="watchdog"),
                         message=f"{decision.message} — {action}")  # fmt: skip
        evidence = None
        if choice is not None and len(candidates) > 1:
            evidence = {"chosen": {
                "run": choice.victim.run_id, "why": choice.why, "protected": choice.protected,
                "ranking": choice.ranking,
                "runs": [{"run": c.run_id, "pinned": c.pinned, "jobs": list(c.jobs),
                          "priority": c.priority, "on_demand": c.on_demand,
                          "idle_s": None if c.idle_s is None else round(c.idle_s, 1),
                          "has_server": c.has_server} for c in candidates],
            }}  # fmt: skip
        self._incident(Incident.Kind.ACT, decision.message, run, action=action, evidence=evidence)
        self._banner(ACT, f"{decision.message}. {action[0].upper()}{action[1:]}.")
        if choice is not None and len(runs) > 1:
            # Others are left: if the memory stays short once this one's is back, the
            # watchdog stops the next (one a decision, never several at once).
            self.watchdog.rearm(decision.at, REARM_SETTLE_S)

    def _candidates(self, runs: list[Run]) -> list[Candidate]:
        """The host's runs as the choice sees them: pinned, the benchmark jobs using each
        (measuring it, or preparing it: a job that has not linked its run yet counts for the
        active run of its recipe here), the catalog's priority (0 without an entry), who
        started it, how long it has been idle, whether it has a server yet. A look-up that
        fails never holds the kill: then what the runs themselves say."""
        try:
            return self._look_up(runs)
        except Exception:
            log.exception("the watchdog's look-ups failed: choosing on the runs alone")
            return [_bare(r) for r in runs]

    def _look_up(self, runs: list[Run]) -> list[Candidate]:
        jobs: dict[int, list[int]] = defaultdict(list)
        by_recipe = {r.recipe_id: r.pk for r in runs if r.host_id == self.host.pk}
        working = Job.objects.filter(state__in=WORKING_JOB_STATES).filter(
            Q(run__in=[r.pk for r in runs]) | Q(run__isnull=True, host=self.host, state=J.PREPARING)
        )  # fmt: skip
        for job_id, run_id, recipe_id in working.values_list("pk", "run_id", "recipe_id"):
            target = run_id if run_id is not None else by_recipe.get(recipe_id)
            if target is not None:
                jobs[target].append(job_id)
        priority = dict(
            OnDemand.objects.filter(recipe_id__in={r.recipe_id for r in runs}).values_list(
                "recipe_id", "priority"
            )
        )
        # The idle clocks live in Redis: read at once, and a slow Redis must not hold the
        # kill for long (a run whose clock is not read in time counts as not idle).
        lookups = {run.pk: self.scraper.submit(_idle_seconds, run) for run in runs}
        deadline = time.monotonic() + IDLE_LOOKUP_S
        idle: dict[int, float | None] = {}
        for pk, lookup in lookups.items():
            try:
                idle[pk] = lookup.result(timeout=max(deadline - time.monotonic(), 0.0))
            except FutureTimeout:
                idle[pk] = None
        return [
            Candidate(
                run_id=run.pk,
                created=run.created_at.timestamp(),
                pinned=run.pinned,
                jobs=tuple(sorted(jobs.get(run.pk, ()))),
                priority=priority.get(run.recipe_id, 0),
                on_demand=run.on_demand,
                idle_s=idle.get(run.pk),
                has_server=bool(run.handle),
            )
            for run in runs
        ]

    def _kill(self, run: Run, decision: Decision, choice: Choice | None, count: int) -> str:
        """Kill one run's server at once and fail the run, saying why it was that one."""
        chosen = ""
        if choice is not None and count > 1:
            chosen = f"chosen of {count} runs on this Spark: {choice.why}"
        reason = f"stopped by the memory watchdog: {decision.message}"
        if chosen:
            reason += f" ({chosen})"
        if not run.handle:
            run.mark_failed(reason)
            what = f"run {run.pk} ({run.recipe}) had no server yet; marked failed"
            return f"{what}, {chosen}" if chosen else what
        engine = engine_for(self.host)
        handle = Handle.parse(run.handle)
        try:
            tail = engine.tail(handle, 40)
        except EngineError:
            tail = []
        killed_at = timezone.now()
        engine.kill(handle)
        advice = ("The host ran out of memory. Lower --gpu-memory-utilization or "
                  "--max-model-len (the planner shows what fits), or stop what else uses "
                  "memory on the Spark.")  # fmt: skip
        if chosen:
            advice += (f" {count} models were running side by side on it; this one was "
                       "stopped first. Run fewer at once there (Hosts → models at once), or "
                       "pin the one that must stay.")  # fmt: skip
        run.refresh_from_db()
        if run.is_active:
            run.mark_failed(reason, advice=advice, log="\n".join(tail))
        elif run.state == RunState.FAILED and run.updated_at >= killed_at:
            # The start's own thread saw its server vanish first and failed the run with
            # what it saw ("the warm-up request failed: Server disconnected"): the kill
            # is the cause, and the run says so.
            Run.objects.filter(pk=run.pk).update(failure_reason=reason, failure_advice=advice)
        with contextlib.suppress(EngineError):
            engine.remove(handle)
        self.stopped_runs.append(run.pk)
        self._interrupt_jobs(decision, run if count > 1 else None)
        if chosen:
            return f"killed run {run.pk} ({run.recipe}), {chosen} — {handle}"
        return f"killed run {run.pk} ({run.recipe}) — {handle}"

    def _act_on_pair(self, run: Run, decision: Decision) -> str:
        """A pair run: this Spark's half is killed at once (its memory is what runs out),
        the run fails, and the other Spark's worker stops its half (docs/two-sparks.md)."""
        engine = engine_for(self.host)
        tail = pair.stop_side(run, self.host, engine)
        run.refresh_from_db()
        if run.is_active:
            run.mark_failed(
                f"stopped by the memory watchdog on {self.host.name}: {decision.message}",
                advice=f"{self.host.name} ran out of memory, so the whole pair was stopped. "
                "Lower --gpu-memory-utilization or --max-model-len (the planner shows what "
                "fits on each Spark), or stop what else uses memory there.",
                log="\n".join(tail),
            )
        pair.stop_other_side(run, self.host)
        self.stopped_runs.append(run.pk)
        self._interrupt_jobs(decision)
        side = "head" if self.host.pk == run.host_id else "worker"
        return f"killed {self.host.name}'s half ({side}) of pair run {run.pk} ({run.recipe})"

    # --- conditions worth an alert (KV cache, preemptions) ------------------------------

    def watch_conditions(self, run: Run, now: float, derived: dict) -> None:
        """KV cache above 90 % for a minute, preemptions: an incident (kind alert) once per
        episode (apps/guard/conditions.py), which reaches subscribers by e-mail and webhook."""
        conditions = self.run_conditions.get(run.pk)
        if conditions is None:
            policy = HangPolicy.objects.filter(recipe_id=run.recipe_id).first()
            slo = policy.ttft_slo_s if policy else None
            conditions = self.run_conditions[run.pk] = RunConditions(ttft_slo_s=slo)
        for alert in conditions.observe(now, derived):
            message = f"Run {run.pk} ({run.recipe}): {alert.message}"
            log.warning("ALERT %s: %s", self.host_name, message)
            self._incident(Incident.Kind.ALERT, message, run, evidence={"rule": alert.rule})

    def watch_disk(self, now: float) -> None:
        """Free space where this Spark keeps its models (its Hugging Face cache, else the
        panel's var/ directory) below GUARD_DISK_MIN_FREE_GB: one incident per episode. A
        simulated Spark has no disk of its own (its models are this machine's): skipped."""
        if self.host.simulated:
            return
        path = self.host.hf_cache_path or str(settings.VAR_DIR)
        try:
            free = shutil.disk_usage(path).free
        except OSError as exc:
            self.errors["disk"] = f"disk: {path}: {exc}"[:300]
            return
        floor = settings.GUARD_DISK_MIN_FREE_GB * 10**9
        if self.disk.feed(now, free < floor):
            message = (f"Disk low on {self.host.name}: {free / 10**9:.1f} GB free at {path} "
                       f"(alert below {settings.GUARD_DISK_MIN_FREE_GB:g} GB): a model download "
                       "or a run's compile cache may fail")  # fmt: skip
            log.warning("ALERT %s: %s", self.host_name, message)
            evidence = {"rule": "disk_low", "free_bytes": free, "path": path}
            self._incident(Incident.Kind.ALERT, message, None, evidence=evidence)

    # --- hangs ---------------------------------------------------------------------------

    def watch_for_hang(self, run: Run, now: float, snapshot, health_ok: bool | None = None) -> None:
        """Feed the run's hang detector one scrape of a ready run: its /metrics, its /health
        (`health_ok`, asked here when not given), and its log's tail when /health fails
        (apps/guard/hang.py); act on a hang."""
        policy = HangPolicy.objects.filter(recipe_id=run.recipe_id).first()
        detector = self.hang_detectors.get(run.pk)
        if detector is None:
            stall_s = policy.stall_s if policy else STALL_S
            # The longest prefill step the run can take may last this long with no metric
            # moving (apps/guard/hang.py); wall seconds, as the agent's clock.
            allowance = prefill_allowance_s(_longest_step(run), run_clock(run).scale)
            detector = HangDetector(stall_s=stall_s, prefill_allowance_s=allowance)
            self.hang_detectors[run.pk] = detector
        if health_ok is None:
            health_ok = _health(run)
        lines: list[str] = []
        if not health_ok and run.handle:
            with contextlib.suppress(EngineError):
                lines = engine_for(self.host).tail(Handle.parse(run.handle), HANG_LOG_LINES)
        hang = detector.observe(
            now,
            running=snapshot.running if snapshot else None,
            generated=snapshot.generation_tokens if snapshot else None,
            health_ok=health_ok,
            log_lines=lines,
            prompt=snapshot.prompt_tokens if snapshot else None,
            kv_usage=snapshot.kv_usage if snapshot else None,
        )
        if hang is not None:
            self.on_hang(run, hang, policy)

    def on_hang(self, run: Run, hang: Hang, policy: HangPolicy | None) -> None:
        """An incident, a banner, the host's running benchmark jobs interrupted (what they
        measured kept), and the recipe's policy: alert only, or a restart after its backoff
        until it has restarted `max_restarts` times in a row for hangs."""
        restarts = _hang_restarts(run)
        delay = policy.restart_delay_s(restarts) if policy else None
        lifecycle.interrupt_working(
            self.host, f"Interrupted: run {run.pk} hung ({hang.message}). The levels measured "
            "before that are kept.", settle=False,
        )  # fmt: skip
        if delay is None:
            if policy is None or policy.action == HangPolicy.Action.ALERT:
                action = "alert only (the recipe's hang policy)"
            else:
                action = (f"not restarted: it was restarted {restarts} time(s) in a row for "
                          f"hangs, the policy's limit")  # fmt: skip
        else:
            with audit_context.acting_as(audit_context.Actor(source="watchdog")):
                run_restart(run=run, user=None, countdown=delay, reason=f"hung: {hang.message}")
            action = (f"restarting it (restart {restarts + 1} of {policy.max_restarts}"
                      + (f", in {delay:g} s)" if delay else ")"))  # fmt: skip
        message = f"Run {run.pk} ({run.recipe}) hung: {hang.message}"
        log.warning("HANG %s: %s — %s", self.host_name, message, action)
        self._incident(Incident.Kind.HANG, message, run, action=action, evidence=hang.evidence)
        self._banner("alert", f"{message}. {action[0].upper()}{action[1:]}.")

    def _interrupt_jobs(self, decision: Decision, run: Run | None = None) -> None:
        """The host's working benchmark jobs lost their model; with `run` (one of several
        runs stopped), only the jobs using it (or preparing its recipe)."""
        # Their worker lives on: it stores the level in flight, cut short, and settles them.
        reason = (f"Interrupted by the memory watchdog: {decision.message}. The levels "
                  "measured before that are kept.")  # fmt: skip
        if run is None:
            lifecycle.interrupt_working(self.host, reason, settle=False)
            return
        jobs = Job.objects.filter(state__in=WORKING_JOB_STATES).filter(
            Q(run=run) | Q(run__isnull=True, host=self.host, recipe_id=run.recipe_id)
        )
        for job in jobs:
            lifecycle.interrupt(job, reason, settle=False)

    def _incident(
        self, kind: str, message: str, run: Run | None, action: str = "", evidence=None
    ) -> Incident:
        curve = [[round(t, 1), v] for t, v in self.watchdog.history()]
        incident = Incident.objects.create(
            host=self.host, run=run, recipe_name=str(run.recipe) if run else "", kind=kind,
            at=timezone.now(), message=message, action=action[:300], memory_curve=curve,
            evidence=evidence or {},
        )  # fmt: skip
        # e.g. subscribers' webhooks (apps/api/apps.py; receivers never raise)
        incident_recorded.send(sender=Incident, incident=incident)
        return incident

    def _banner(self, level: str, message: str) -> None:
        # The guard's state for this host: every page renders it (apps/guard/live.py).
        live.set_banner(self.host.name, level, message)

    # --- metrics, heartbeat and history ---------------------------------------------------

    def scrape_and_publish(self, now: float) -> dict:
        """Scrape every active run of the host, publish, beat, bucket. Returns the host's
        sample: its memory, a `runs` entry per active run (oldest first) and, at the top
        level as before co-location, the first run's (`run`, `run_state`, its metrics)."""
        # A run's samples belong to it in every phase (queued, pulling, starting, loading,
        # ...): memory during a load is what matters most, so the run page's charts get it
        # from the first second. Its /metrics exist only once the server is up (warming
        # onwards): scraped then, not before.
        runs = self._active_runs()
        self.run_loading = any(run.state in LOADING_STATES for run in runs)
        # A pair run's /metrics are its head's (the API server): the worker Spark's agent
        # records its own memory for the run, and scrapes nothing.
        scraped = [r for r in runs if r.host_id == self.host.pk and r.state in SCRAPED_STATES]
        self._forget({r.pk for r in scraped}, {r.pk for r in runs})
        fetched = self._fetch(scraped)
        entries = [self._entry(run, now, fetched.get(run.pk)) for run in runs]
        if now >= self.next_gpu:
            self.next_gpu = now + GPU_EVERY_S
            self.gpu = self._gpu_processes()
        total, available, mem_error = self.memory
        decision = self.last_decision
        memory = {
            "t": round(now, 3),
            "mem_total": total,
            "mem_available": available,
            "mem_error": mem_error,
            "mem_level": decision.level if decision else "unknown",
            # The forecast: how fast MemAvailable falls and when it would reach the act
            # line (None while it is not falling); the live chart draws it.
            "mem_fall_bytes_s": decision.fall_bytes_s if decision else None,
            "mem_eta_s": decision.eta_s if decision else None,
            "warn_bytes": int(self.host.watchdog_warn_gib * GIB),
            "act_bytes": int(self.host.watchdog_act_gib * GIB),
            "psi_some_avg10": self.psi,
            "gpu_processes": self.gpu,
        }
        sample = {**self._sample(memory, entries[0] if entries else None), "runs": entries}
        run_samples = [self._sample(memory, entry) for entry in entries]
        scrape_errors = [
            (f"run {e['run']} " if len(entries) > 1 else "") + e["scrape_error"]
            for e in entries
            if e["scrape_error"]
        ]
        errors = "; ".join(self.errors.values()) or mem_error or "; ".join(scrape_errors)
        Host.objects.filter(pk=self.host.pk).update(
            agent_seen_at=timezone.now(), agent_sample=sample, agent_error=errors[:300]
        )
        self.publish(sample, run_samples)
        self._bucket(run_samples or [sample], now)
        self._refresh_host()
        return sample

    def _sample(self, memory: dict, entry: dict | None) -> dict:
        """A sample: the host's memory and one run's entry (or no run)."""
        entry = entry or {"run": None, "run_state": None, "pair_worker": False, "scrape_error": ""}
        head = {key: entry[key] for key in ("run", "run_state", "pair_worker")}
        rest = {k: v for k, v in entry.items() if k not in head}
        return {"host": self.host_name, **head, **memory, **rest}

    def _forget(self, scraped: set[int], active: set[int]) -> None:
        """Per-run state of runs gone: rates and hang detection restart when a run is
        scraped again; the alert episodes (conditions) last while the run is active."""
        for state, keep in ((self.derivers, scraped), (self.hang_detectors, scraped),
                            (self.run_conditions, active)):  # fmt: skip
            for pk in [pk for pk in state if pk not in keep]:
                del state[pk]
        for what in [w for w in self.errors if w.startswith(("hang run ", "conditions run "))]:
            if int(what.rpartition(" ")[2]) not in scraped:
                del self.errors[what]  # a run no longer watched: its error is no news

    def _fetch(self, runs: list[Run]) -> dict[int, tuple]:
        """Each run's /metrics (and its /health when ready), all runs at once: a slow
        server must not hold the others' scrapes, nor the next memory poll, for long.
        {run pk: (FetchResult, Snapshot | None, health_ok | None)}."""

        def one(run: Run) -> tuple:
            try:
                url = endpoints.url(run.local_endpoint, endpoints.METRICS)
                result, snapshot = scrape.scrape(url, timeout=SCRAPE_TIMEOUT_S,
                                                 max_bytes=SCRAPE_MAX_BYTES)  # fmt: skip
                health = _health(run) if run.state == RunState.READY else None
            except Exception as exc:  # one run's trouble never costs the others their scrape
                log.exception("scraping run %s", run.pk)
                error = f"{type(exc).__name__}: {exc}"
                return scrape.FetchResult(False, None, error, 0.0, None), None, None
            return result, snapshot, health

        if len(runs) <= 1:
            return {run.pk: one(run) for run in runs}
        futures = {run.pk: self.scraper.submit(one, run) for run in runs}
        return {pk: future.result() for pk, future in futures.items()}

    def _entry(self, run: Run, now: float, fetched: tuple | None) -> dict:
        """One run's part of the samples: its state and, where this Spark scraped it, its
        derived metrics; a ready run's scrape also feeds its hang and condition watches."""
        derived: dict = {}
        scrape_error = ""
        if fetched is not None:
            result, snapshot, health_ok = fetched
            deriver = self.derivers.get(run.pk)
            if deriver is None:
                # Rates per second of the run's clock (apps/hosts/clock.py).
                deriver = self.derivers[run.pk] = scrape.Deriver(time_scale=run_clock(run).scale)
            deriver.feed(time.monotonic(), snapshot if result.ok else None)
            derived = deriver.sample()
            scrape_error = "" if result.ok else f"metrics: {result.error}"
            if run.state == RunState.READY:
                self._guard(f"hang run {run.pk}", self.watch_for_hang, run, now,
                            snapshot if result.ok else None, health_ok)  # fmt: skip
                self._guard(f"conditions run {run.pk}", self.watch_conditions, run, now, derived)
        return {
            "run": run.pk,
            "run_state": run.state,
            "pair_worker": run.peer_host_id == self.host.pk,
            **{k: v for k, v in derived.items() if k != "errors"},
            "scrape_error": scrape_error,
        }

    def _gpu_processes(self) -> list[dict] | None:
        """Per-process GPU memory from nvidia-smi, where it exists (None here and in
        simulation; on GB10 its memory column may be "Not Supported": kept as None)."""
        try:
            found = gpu_processes()
        except NvidiaSmiError as exc:
            self.errors["nvidia-smi"] = f"nvidia-smi: {exc}"[:300]
            return None
        self.errors.pop("nvidia-smi", None)
        if found is None:
            return None
        return [{"pid": p.pid, "name": p.name, "used_bytes": p.used_bytes} for p in found]

    def publish(self, sample: dict, run_samples: list[dict] | None = None) -> None:
        """The host's sample to its group; each run's own sample to the run's group (a
        pair's worker Spark: its host's stream only — the run page shows it apart)."""
        sends = [(host_group(self.host_name), sample)]
        if run_samples is None:  # one sample for the host and its run
            run_samples = [sample] if sample.get("run") else []
        sends += [(run_group(s["run"]), s) for s in run_samples
                  if s.get("run") and not s.get("pair_worker")]  # fmt: skip
        try:
            self.loop.run_until_complete(self._send(sends))
        except Exception as exc:  # Redis down: the history and heartbeat still work
            self.errors["publish"] = f"publish: {exc}"[:300]
        else:
            self.errors.pop("publish", None)

    async def _send(self, sends: list[tuple[str, dict]]) -> None:
        messages = (self.layer.group_send(g, {"type": SAMPLE_EVENT, "sample": s}) for g, s in sends)
        await asyncio.wait_for(asyncio.gather(*messages), timeout=2)

    def _bucket(self, samples: list[dict], now: float) -> None:
        """Each sample into its run's bucket (run None: the host's, while no run is
        active); every bucket_s seconds one row per bucket."""
        if self.bucket_started is not None and now - self.bucket_started >= self.bucket_s:
            HostSample.objects.bulk_create([b.row(self.host) for b in self.buckets.values()])
            self.buckets, self.bucket_started = {}, None
        if self.bucket_started is None:
            self.bucket_started = now
        for sample in samples:
            run = sample.get("run")
            if run not in self.buckets:
                self.buckets[run] = _Bucket(started=self.bucket_started, run_id=run)
            self.buckets[run].add(sample)

    def _refresh_host(self) -> None:
        """Thresholds edited by an admin apply without restarting the agent."""
        fresh = Host.objects.get(pk=self.host.pk)
        if (fresh.watchdog_warn_gib, fresh.watchdog_act_gib) != (
            self.host.watchdog_warn_gib, self.host.watchdog_act_gib
        ):  # fmt: skip
            self.watchdog = self._watchdog()
        self.host = fresh

    def prune(self, now: float) -> int:
        cutoff = timezone.now() - timedelta(days=settings.TELEMETRY_RETENTION_DAYS)
        deleted, _ = HostSample.objects.filter(host=self.host, at__lt=cutoff).delete()
        return deleted


HANG_LOG_LINES = 40
HEALTH_TIMEOUT_S = 1.0


def _health(run: Run) -> bool:
    """GET /health answered 200 (vLLM answers 503 once its engine died)."""
    try:
        url = endpoints.url(run.local_endpoint, endpoints.HEALTH)
        answer = httpx.get(url, headers=run.upstream_headers, timeout=HEALTH_TIMEOUT_S,
                           verify=client_context())  # fmt: skip
        return answer.status_code == 200
    except httpx.HTTPError:
        return False


def _bare(run: Run) -> Candidate:
    """A run as the choice sees it without looking anything up."""
    return Candidate(run_id=run.pk, created=run.created_at.timestamp(), pinned=run.pinned,
                     on_demand=run.on_demand, has_server=bool(run.handle))  # fmt: skip


def _idle_seconds(run: Run) -> float | None:
    """Seconds since the run last served a request (the gateway's idle clock), or since it
    became ready; None when that cannot be read."""
    try:
        return catalog.idle_seconds(run)
    except Exception:  # the choice goes on without it
        log.exception("idle time of run %s", run.pk)
        return None


def _max_model_len(run: Run) -> int | None:
    """The longest prompt + answer the run's server accepts: what its log said it uses
    (`Using max model len N`, in the run's facts), else its vector's --max-model-len, else
    its recipe's."""
    found = (run.facts or {}).get("max_model_len")
    if not found:
        given = [v for f, v in options.given(list(run.argv or [])) if f == "--max-model-len"]
        found = given[-1] if given else None
    try:
        value = int(found)
    except (TypeError, ValueError):
        value = run.recipe.context_tokens
    return value if value and value > 0 else None


def _longest_step(run: Run) -> int | None:
    """The most prompt tokens one engine step prefills: with chunked prefill (always on in
    vLLM V1; its log says `Chunked prefill is enabled with max_num_batched_tokens=N`, in
    the run's facts) N, since KV usage moves between chunks; else the whole longest prompt."""
    longest = _max_model_len(run)
    chunk = (run.facts or {}).get("max_num_batched_tokens")
    if isinstance(chunk, int) and chunk > 0:
        return min(chunk, longest) if longest else chunk
    return longest


def _hang_restarts(run: Run, limit: int = 20) -> int:
    """How many times in a row this run's chain was restarted for a hang: the run it
    restarted, and the one before, … each with a hang incident that restarted it."""
    count, current = 0, run.restart_of
    while current is not None and count < limit:
        restarted = Incident.objects.filter(
            run=current, kind=Incident.Kind.HANG, action__startswith="restarting"
        ).exists()
        if not restarted:
            break
        count += 1
        current = current.restart_of
    return count

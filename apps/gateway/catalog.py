"""Models on demand: the catalog (OnDemand rows), where a model loads when someone asks for
it through /v1, and which runs are stopped again when idle. docs/gateway.md, "Models on
demand".

Placement (`place`): a load goes to an allowed Spark with room now — nothing on it, or,
where the host runs several models side by side (`Host.max_runs`), room beside what it
runs: the co-location rules (apps/runs/colocation.py: the ≤ 0.90 rule over the sum of
the pools, one start at a time, exclusive groups) and the measured memory with the freeze
margin; one whose cache holds the weights first, then an empty one. Else it stops the
fewest on-demand runs on an allowed Spark whose stop makes room — the lowest priority,
then the one idle longest, first — each of a priority not higher and not pinned, not
claimed by a benchmark and not serving a request; else it cannot load now, and says why
(a held request may wait in line: `request_load`). vLLM's sleep
mode is not used (it has crashed GB10 hosts: vllm #50011): a switch is a stop and a
start. Requests share one start (the run is the start: while it loads, every request for
the model sees it). Every automatic start and stop is an audit row and a team notice with
its reason.

Use: only inference requests mark a run used (`gw:used:<run>`, set by the gateway's
release script, apps/gateway/store.py); listing models does not keep one alive.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from apps.audit import services as audit
from apps.audit.context import Actor, acting_as
from apps.core.models import Notice
from apps.core.redisconn import RedisError
from apps.core.services import notice_post
from apps.gateway import store
from apps.gateway.models import OnDemand
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import STARTING_STATES, Run, RunState
from apps.runs.services import (
    Occupancy,
    RunRefused,
    memory_refusal,
    pool_bytes,
    run_start,
    run_stop,
)
from apps.telemetry.models import HostSample

log = logging.getLogger(__name__)

LOAD_LOCK_S = 30  # one placement decision at a time per model, across panel processes
# A run replaced for another model must have served nothing for this long (a request that
# just ended is often followed by the next one).
MIN_IDLE_TO_REPLACE_S = 60
ACTOR = Actor(source="on-demand")
NOTICE_HOURS = 2
SCALE_WINDOW_S = 60  # a replica is added after a minute under load
SHRINK_AFTER_S = 300  # an extra replica stops after 5 minutes with no request waiting


@dataclass(frozen=True)
class LoadState:
    """Where an on-demand model stands, for /v1/models and a waiting request."""

    state: str  # "ready", "loading", "can_load", "cannot_load", "queued" (a held request's)
    message: str
    run_id: int | None = None
    host: str = ""
    percent: float | None = None
    eta_s: float | None = None
    position: int | None = None  # in line for a Spark ("queued")

    @property
    def retry_after_s(self) -> int:
        """When a client should ask again: soon while it loads, later when it cannot."""
        if self.state == "cannot_load":
            return 60
        if self.eta_s:
            return max(5, min(int(self.eta_s / 4), 60))
        return 15

    def as_dict(self) -> dict:
        out = {"state": self.state, "message": self.message}
        if self.host:
            out["host"] = self.host
        if self.percent is not None:
            out["percent"] = round(self.percent, 1)
        if self.eta_s is not None:
            out["eta_s"] = int(self.eta_s)
        if self.position is not None:
            out["position"] = self.position
        return out


def _minutes(seconds: float) -> str:
    return f"about {max(1, round(seconds / 60))} min" if seconds >= 60 else "under a minute"


def _loading(run: Run, name: str) -> LoadState:
    eta = run.remaining_seconds()
    if eta is None:
        past = last_cold_start_s(run.recipe, run.host)
        if past:
            eta = max(past - run.elapsed_seconds(), 0.0) or None
    words = f"loading model {name} on {run.host.name}: {run.get_state_display().lower()}"
    if run.state == RunState.LOADING and run.percent:
        words += f", {run.percent:.0f} %"
    if eta:
        words += f", {_minutes(eta)}"
    percent = run.percent if run.state in (RunState.LOADING, RunState.PULLING) else None
    return LoadState("loading", words, run.pk, run.host.name, percent, eta)


def last_cold_start_s(recipe: Recipe, host: Host) -> float | None:
    """The last measured start-up of the recipe on that Spark: wall seconds from its first
    phase to ready (what a waiting request waits, on a simulated host too)."""
    runs = Run.objects.filter(recipe=recipe, host=host, timings__has_key="ready")
    for run in runs.order_by("-created_at")[:5]:
        try:
            starts = [datetime.fromisoformat(span["start"]) for span in run.timings.values()]
            ready = datetime.fromisoformat(run.timings["ready"]["start"])
        except (KeyError, TypeError, ValueError):
            continue
        seconds = (ready - min(starts)).total_seconds()
        if seconds > 0:
            return seconds
    return None


def state_of(entry: OnDemand, name: str = "") -> LoadState:
    """Where the entry's model stands now (no side effect)."""
    return _standing(entry, name or entry.recipe.public_name)[0]


def _standing(entry: OnDemand, name: str) -> tuple[LoadState, Placement | None]:
    """Where the entry's model stands, with the placement a load would take when it is
    not running (computed once: it measures every allowed Spark)."""
    runs = Run.objects.active().filter(recipe=entry.recipe).select_related("host", "recipe")
    for run in runs:
        if run.state == RunState.READY:
            ready = LoadState("ready", f"{name} is ready on {run.host.name}", run.pk, run.host.name)
            return ready, None
    for run in runs:
        if run.state in STARTING_STATES:
            return _loading(run, name), None
    try:
        pending = store.pending_load(entry.recipe_id)
    except RedisError:
        pending = None
    if pending:  # it made room by stopping runs, and starts once they have stopped
        return LoadState("loading", f"loading model {name} on {pending}"), None
    placement = place(entry)
    return _can_load(placement, name), placement


def _can_load(placement: Placement, name: str) -> LoadState:
    if placement.host is None:
        return LoadState("cannot_load", f"{name} cannot load now: {placement.why}")
    if placement.stops:
        words = (f"{name} can load on {placement.host.name} (replacing idle "
                 f"{placement.stops_words()})")  # fmt: skip
    elif placement.beside:
        words = f"{name} can load on {placement.host.name} (beside {', '.join(placement.beside)})"
    else:
        words = f"{name} can load on {placement.host.name}"
    return LoadState("can_load", words, host=placement.host.name)


@dataclass(frozen=True)
class Placement:
    host: Host | None
    stops: tuple[Run, ...] = ()  # the idle runs a load stops first, least important first
    why: str = ""  # why no Spark can take it now
    beside: tuple[str, ...] = ()  # the models it joins on a Spark that runs several
    # No room now, but some will come by itself: an allowed Spark is reserved by a
    # benchmark, or holds a run that is not pinned and not an operator's ready one (an
    # on-demand run goes when idle; a start or stop ends). A held request waits in line.
    waits: bool = False

    def stops_words(self) -> str:
        return " and ".join(f"“{run.recipe}”" for run in self.stops)


def place(entry: OnDemand) -> Placement:
    """The Spark a load of the entry's model goes to (module docstring), or why none:
    one with room now — nothing on it, or room beside what it runs (apps/runs/colocation.py
    and the measured memory) — whose cache holds the weights first, then an empty one;
    else the one where stopping the fewest idle on-demand runs makes room (`_victims`)."""
    allowed = list(entry.hosts.all()) or list(Host.objects.all())
    if allowed and all(h.retired for h in allowed):  # a retired Spark takes no load
        names = ", ".join(h.name for h in allowed)
        return Placement(None, why=f"every Spark it may run on is retired ({names})")
    allowed = [h for h in allowed if not h.retired]
    if not allowed:
        return Placement(None, why="no Spark is registered")
    recipe = entry.recipe
    room, replaceable, reasons = [], [], []
    waits = False
    for host in sorted(allowed, key=lambda h: h.name):
        occupancy = Occupancy.of(host)
        if occupancy.reserved:
            reasons.append(f"{host.name} is reserved for a benchmark")
            waits = True
            continue
        runs = occupancy.runs
        waits = waits or any(not r.pinned and (r.on_demand or r.state != RunState.READY)
                             for r in runs)  # fmt: skip
        why = occupancy.refusal(recipe) if runs else None
        if why is None and runs:
            why = memory_refusal(host, recipe)
        if why is None:
            cached = host.cached_model(recipe.model_id) is not None
            room.append(((not cached, len(runs), host.name), host, runs))
            continue
        victims, why_not = _victims(host, entry, runs)
        if not victims:
            reasons.append(why_not or why)
        else:
            cost = [(_priority(v), -idle_seconds(v)) for v in victims]
            replaceable.append(((len(victims), max(cost)), host, victims))
    if room:
        room.sort(key=lambda item: item[0])
        _, host, runs = room[0]
        return Placement(host, beside=tuple(str(r.recipe) for r in runs))
    if replaceable:
        replaceable.sort(key=lambda item: item[0])
        _, host, victims = replaceable[0]
        return Placement(host, tuple(victims))
    return Placement(None, why="; ".join(reasons) or "no Spark can take it", waits=waits)


def _priority(run: Run) -> int:
    theirs = OnDemand.objects.filter(recipe_id=run.recipe_id).first()
    return theirs.priority if theirs is not None else 0


def _victims(host: Host, entry: OnDemand, runs: list[Run]) -> tuple[list[Run], str]:
    """The fewest idle runs on the host whose stop makes room for the entry's model — the
    least important first: lowest priority, then idle longest — or why no stop may make
    room there (a run that may not be stopped, or room that stopping all the others would
    still not make)."""
    stoppable, reasons = [], []
    for run in runs:
        why = _why_not_replace(run, entry)
        if why:
            reasons.append(f"{host.name} runs “{run.recipe}” ({why})")
        else:
            stoppable.append(run)
    stoppable.sort(key=lambda run: (_priority(run), -idle_seconds(run)))
    chosen: list[Run] = []
    blocked = "nothing there may be stopped for it"
    for run in stoppable:
        chosen.append(run)
        rest = [r for r in runs if r not in chosen]
        blocked = Occupancy(host, rest).refusal(entry.recipe)
        if blocked is None and rest:
            freed = sum(pool_bytes(r.recipe, host) for r in chosen)
            blocked = memory_refusal(host, entry.recipe, freed_bytes=freed)
        if blocked is None:
            return chosen, ""
    if stoppable:
        reasons.append(f"stopping {' and '.join(f'“{r.recipe}”' for r in stoppable)} on "
                       f"{host.name} would not make room: {blocked}")  # fmt: skip
    return [], "; ".join(reasons)


def _why_not_replace(run: Run, entry: OnDemand) -> str:
    """Why a load of `entry` may not stop `run` ("" when it may)."""
    if run.recipe_id == entry.recipe_id:
        return "already this model"
    if run.pinned:
        return "pinned"
    theirs = OnDemand.objects.filter(recipe_id=run.recipe_id).first()
    if not run.on_demand and not (theirs and theirs.may_replace_manual):
        return "started by an operator"
    if theirs is not None and theirs.priority > entry.priority:
        return f"priority {theirs.priority} over {entry.priority}"
    if run.state != RunState.READY:
        return run.get_state_display().lower()
    if busy(run):
        return "serving requests"
    idle = idle_seconds(run)
    if idle < MIN_IDLE_TO_REPLACE_S:
        return f"used {int(idle)} s ago"
    return ""


def idle_seconds(run: Run) -> float:
    """Seconds since the run last served a request through the panel, or since it became
    ready when it never did."""
    used = store.last_used(run.pk)
    if used is None:
        ready = (run.timings.get(RunState.READY) or {}).get("start")
        since = datetime.fromisoformat(ready) if ready else run.created_at
        used = since.timestamp()
    return max(time.time() - used, 0.0)


def busy(run: Run) -> bool:
    """Requests running or waiting on the run's server, by its latest telemetry."""
    sample = HostSample.objects.filter(run=run).order_by("-at").first()
    if sample is None:
        return False
    return bool((sample.running or 0) > 0 or (sample.waiting or 0) > 0)


def request_load_for(recipe_id: int, requester_id: int | None, *, wait: bool = False) -> LoadState:
    """request_load for the gateway, which knows the requester by id."""
    from django.contrib.auth import get_user_model

    requester = get_user_model().objects.filter(pk=requester_id).first() if requester_id else None
    return request_load(recipe_id, requester, wait=wait)


def states(names: dict[str, int]) -> dict[str, LoadState]:
    """Where each on-demand model stands ({public name: recipe id} -> {name: state}), for
    GET /v1/models: at most the catalog's size of entries."""
    rows = OnDemand.objects.select_related("recipe").filter(recipe_id__in=set(names.values()))
    entries = {e.recipe_id: e for e in rows}
    return {name: state_of(entries[rid], name) for name, rid in names.items() if rid in entries}


def request_load(recipe_id: int, requester=None, *, wait: bool = False) -> LoadState:
    """A request for an on-demand model that no run serves: start it (or say where it
    stands, when a start is already under way — requests share one start), or say why it
    cannot load now. Safe to call from many requests at once.

    The line: a model that cannot load now, but will find room once what holds the
    Sparks ends by itself (`Placement.waits`), while someone waits for it (`wait`: a held
    request, asking again every few seconds) is put in line for a Spark ("queued", with
    its place); a model with room yields to one that has been in line longer and could
    load now too, so Sparks freed go to the models in the order they were asked for."""
    entry = OnDemand.objects.select_related("recipe").filter(recipe_id=recipe_id).first()
    if entry is None:
        return LoadState("cannot_load", "this model is not in the on-demand catalog")
    name = entry.recipe.public_name
    lock = f"gw:load:{recipe_id}"
    try:
        token = store.lock(lock, LOAD_LOCK_S)
    except RedisError:
        return LoadState("cannot_load", f"{name} cannot load now: the panel's Redis is down")
    if token is None:  # another request is placing it right now: it will show as loading
        return LoadState("loading", f"loading model {name}: starting")
    try:
        current, placement = _standing(entry, name)
        waits = placement is not None and placement.waits
        if current.state == "can_load" and placement is not None:
            ahead = _ahead_in_line(recipe_id)
            if ahead is None:
                _leave_line(recipe_id)
                return _load(entry, name, placement, requester)
            current = LoadState("cannot_load", f"{name} cannot load now: {ahead} was asked "
                                "for first and takes the room")  # fmt: skip
            waits = True
        if current.state == "cannot_load" and wait and waits:
            return _queued(recipe_id, current)
        if current.state != "cannot_load":
            _leave_line(recipe_id)
        return current
    finally:
        store.unlock(lock, token)


def _ahead_in_line(recipe_id: int) -> str | None:
    """The first model in line before this one that could load now (its name), if any."""
    try:
        line = store.load_line()
    except RedisError:
        return None
    if recipe_id not in line:
        line = [*line, recipe_id]
    for other in line[: line.index(recipe_id)]:
        entry = OnDemand.objects.select_related("recipe").filter(recipe_id=other).first()
        if entry is not None and state_of(entry).state == "can_load":
            return entry.recipe.public_name
    return None


def _queued(recipe_id: int, why: LoadState) -> LoadState:
    try:
        position = store.queue_load(recipe_id)
    except RedisError:
        return why
    reason = why.message.split(": ", 1)[-1]
    place_words = "first" if position == 1 else f"number {position}"
    return LoadState("queued", f"waiting for a Spark, {place_words} in line ({reason})",
                     position=position)  # fmt: skip


def _leave_line(recipe_id: int) -> None:
    with contextlib.suppress(RedisError):
        store.unqueue_load(recipe_id)


def _load(entry: OnDemand, name: str, placement: Placement, requester) -> LoadState:
    host, victims = placement.host, placement.stops
    who = requester.get_username() if requester is not None else "a request"
    if victims:
        reason = f"replaced by on-demand {name}, asked for by {who}"
        with acting_as(ACTOR):
            for victim in victims:
                run_stop(run=victim, reason=reason)
            _notice(f"{host.name}: stopping idle {placement.stops_words()} to load {name} "
                    f"for {who}.")  # fmt: skip
        from apps.gateway.tasks import load_after_stop

        words = f"{host.name}: stopping idle {placement.stops_words()} first"
        store.set_pending_load(entry.recipe_id, words)
        args = [entry.recipe_id, host.pk, getattr(requester, "pk", None)]
        transaction.on_commit(lambda: load_after_stop.apply_async(args=args, queue=host.queue))
        return LoadState("loading", f"loading model {name} on {words}", host=host.name)
    return start_on(entry, host, requester)


def start_on(entry: OnDemand, host: Host, requester, *, reason: str = "") -> LoadState:
    """Start the entry's model on `host` now (admission as any start); `reason` says why
    when no request asked ("replica: requests waiting for a minute")."""
    name = entry.recipe.public_name
    who = requester.get_username() if requester is not None else "a request"
    why = reason or f"asked for by {who}"
    try:
        with transaction.atomic(), acting_as(ACTOR):
            run = run_start(recipe=entry.recipe, host=host, user=None)
            Run.objects.filter(pk=run.pk).update(on_demand=True)
            audit.record("run.on_demand_load", run, message=why,
                         after={"recipe": entry.recipe.name, "host": host.name})  # fmt: skip
            _notice(f"Loading {name} on {host.name}: {why} (on demand).")
    except RunRefused as exc:
        return LoadState("cannot_load", f"{name} cannot load on {host.name} now: {exc}")
    run.refresh_from_db()
    return _loading(run, name)


def _notice(message: str) -> None:
    notice_post(author=None, message=message[: Notice.MAX_LENGTH], level=Notice.Level.INFO,
                expires_at=timezone.now() + timedelta(hours=NOTICE_HOURS))  # fmt: skip


def unload_idle() -> list[int]:
    """Stop the on-demand runs idle past their catalog entry's timeout (and serving
    nothing); returns their ids. Runs an operator started are left alone unless the
    catalog lets a load replace them."""
    stopped = []
    runs = Run.objects.active().filter(state=RunState.READY).select_related("recipe", "host")
    for run in runs:
        entry = OnDemand.objects.filter(recipe_id=run.recipe_id).first()
        if entry is None or run.pinned or not (run.on_demand or entry.may_replace_manual):
            continue
        idle = idle_seconds(run)
        if idle < entry.idle_timeout_s or busy(run):
            continue
        reason = f"idle for {_minutes(idle).removeprefix('about ')} (on demand)"
        with transaction.atomic(), acting_as(ACTOR):
            run_stop(run=run, reason=reason)
            _notice(f"{run.host.name}: stopped {run.recipe.public_name}, {reason}.")
        stopped.append(run.pk)
    return stopped


def _buckets_over(runs: list[Run], seconds: float, now: datetime) -> list[HostSample]:
    """The runs' telemetry buckets (the host agents' 10-second HostSample rows, one per
    run) of the last `seconds`, oldest first — none unless they cover that time (a run just
    ready has not shown it yet)."""
    since = now - timedelta(seconds=seconds)
    samples = list(HostSample.objects.filter(run__in=runs, at__gte=since).order_by("at"))
    if not samples or (samples[0].at - since).total_seconds() > seconds / 6:
        return []
    return samples


def under_load(entry: OnDemand, runs: list[Run], now: datetime) -> str:
    """Why the entry's ready runs are under load ("" when not): every telemetry bucket of
    the last minute shows requests waiting, or a p95 TTFT over the entry's SLO."""
    samples = _buckets_over(runs, SCALE_WINDOW_S, now)
    if not samples:
        return ""
    slo = entry.replica_ttft_slo_s
    waiting = all((s.waiting or 0) > 0 for s in samples)
    slow = slo is not None and all((s.ttft_p95 or 0) > slo for s in samples)
    if waiting:
        return "requests waiting for a minute"
    if slow:
        return f"time to first token (p95) over {slo:g} s for a minute"
    return ""


def quiet_for(runs: list[Run], seconds: float, now: datetime) -> bool:
    """No telemetry bucket of the last `seconds` shows a request waiting on these runs,
    and the buckets cover that time."""
    samples = _buckets_over(runs, seconds, now)
    return bool(samples) and not any((s.waiting or 0) > 0 for s in samples)


def scale_replicas(now=None) -> list[str]:
    """Replicas under load (every 30 s, with the idle unload): an entry that allows more
    than one copy gets another on a Spark with room (placement as for a load: never
    beside a copy of itself) while its ready copies are under load for a minute, and
    loses its newest on-demand copy after SHRINK_AFTER_S with no request waiting. One
    change per entry per pass, none while a copy is starting. Returns what it did."""
    now = now or timezone.now()
    done = []
    for entry in OnDemand.objects.select_related("recipe").filter(max_replicas__gt=1):
        runs = list(Run.objects.active().filter(recipe=entry.recipe).select_related("host"))
        if any(r.state != RunState.READY for r in runs) or not runs:
            continue
        name = entry.recipe.public_name
        why = under_load(entry, runs, now) if len(runs) < entry.max_replicas else ""
        if why:
            placement = place(entry)
            if placement.host is None or placement.stops:
                log.info("no room for another replica of %s: %s", name,
                         placement.why or "it would stop another model")  # fmt: skip
                continue
            state = start_on(entry, placement.host, None, reason=f"replica: {why}")
            done.append(f"{name}: {state.message}")
            continue
        extra = [r for r in runs if r.on_demand and not r.pinned and not busy(r)]
        if len(runs) > 1 and extra and quiet_for(runs, SHRINK_AFTER_S, now):
            newest = max(extra, key=lambda r: r.created_at)
            reason = f"replica no longer needed: no request waiting for {SHRINK_AFTER_S // 60} min"
            with transaction.atomic(), acting_as(ACTOR):
                run_stop(run=newest, reason=reason)
                _notice(f"{newest.host.name}: stopped a replica of {name} ({reason}).")
            done.append(f"{name}: stopped run {newest.pk}")
    return done


def overview(now=None, *, only: int | None = None) -> list[dict]:
    """Each catalog entry with what it costs, for the Models page: where it stands (and,
    when it is not loaded, which Spark a load would take and what it would stop), its last
    measured cold start on each Spark it may run on, its idle timeout, and who used it in
    the last hour."""
    from apps.gateway.models import UsageRecord

    now = now or timezone.now()
    out = []
    entries = OnDemand.objects.select_related("recipe").prefetch_related("hosts")
    if only is not None:
        entries = entries.filter(pk=only)
    for entry in entries:
        recipe = entry.recipe
        state, placement = _standing(entry, recipe.public_name)
        hosts = list(entry.hosts.all()) or list(Host.objects.order_by("name"))
        hosts = [h for h in hosts if not h.retired]  # a retired Spark takes no load
        cold = []
        for host in hosts:
            seconds = last_cold_start_s(recipe, host)
            words = _minutes(seconds) if seconds else "never started there"
            cold.append({"host": host.name, "seconds": seconds, "words": words})
        users = sorted(set(
            UsageRecord.objects.filter(model__in=recipe.served_names,
                                       at__gte=now - timedelta(hours=1), user__isnull=False)
            .values_list("user__username", flat=True)
        ))  # fmt: skip
        evicts = ""
        if state.state == "can_load" and placement is not None and placement.stops:
            evicts = f"{placement.stops_words()} on {placement.host.name}"
        replicas = Run.objects.active().filter(recipe=recipe).count()
        out.append({"entry": entry, "name": recipe.public_name, "state": state,
                    "replicas": replicas,
                    "sparks": [h.name for h in entry.hosts.all()], "cold": cold,
                    "users": users, "evicts": evicts,
                    "idle": _minutes(entry.idle_timeout_s).removeprefix("about ")})  # fmt: skip
    return out

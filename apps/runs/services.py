"""Starting and stopping runs: admission control, then the host's own queue does the work."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.roles import OPERATE_RUNS
from apps.audit import context as audit_context
from apps.audit import services as audit
from apps.core.hooks import gathered
from apps.core.selectors import workers_state
from apps.hosts.models import Host, SparkPair, pair_of
from apps.recipes.launch import argv_on
from apps.recipes.models import Recipe
from apps.recipes.startup import vllm_prediction
from apps.runs import colocation, live
from apps.runs.models import ACTIVE_STATES, STARTING_STATES, InvalidTransition, Run, RunState
from apps.runs.mods import ModRefused, bundles_for
from apps.runs.signals import Claim, host_claims
from sparkdomain import planner
from sparkdomain.command import UnsafeCommand, contract_problems
from sparkdomain.env_rules import variable_problem
from sparkdomain.flags import FlagError, check_utilization
from sparkdomain.meminfo import MeminfoError
from sparkdomain.pair import RAY_BACKEND_FLAG, Side, needs_pair, plan_pair
from sparkdomain.planner.utilization import startable_now
from sparkdomain.spark import GB, GIB


class RunRefused(Exception):
    """Admission control said no; the message says why, with numbers. `code` says which
    rule: host_busy, no_free_port, not_enough_memory, memory_unknown, pinned, not_active,
    host_retired (the state of the host or the run), or image_not_allowed, unsafe_recipe,
    does_not_fit, forbidden (the request itself)."""

    def __init__(self, message: str, code: str = "refused"):
        super().__init__(message)
        self.code = code


def _free_port(host: Host) -> int:
    taken = set(Run.objects.active().filter(host=host).values_list("port", flat=True))
    for port in range(host.port_min, host.port_max + 1):
        if port in taken:
            continue
        if host.engine == Host.Engine.PROCESS or (
            host.docker_network == Host.DockerNetwork.HOST and host.advertise_host == "127.0.0.1"
        ):
            # A server on this machine's network: the port must also be free here.
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise RunRefused(
        f"no free port in {host.name}'s range {host.port_min}–{host.port_max}", "no_free_port"
    )


@dataclass
class Occupancy:
    """What holds a host now: its active runs and what other apps claim it for (their
    answers to apps/runs/signals.py::host_claims: the benchmark jobs queued or running
    there, FIFO). `refusal` is the one answer run admission gives (a manual start: one
    model at a time, or several side by side where the host allows and they fit:
    apps/runs/colocation.py); `job_refusal` and `waiting_for` are what a benchmark job
    meets — the jobs API, the queue form (for every recipe at once) and its queued row. A
    benchmark job always takes the host alone (a neighbour would share its bandwidth)."""

    host: Host
    runs: list[Run]  # every active run, oldest first (colocation.runs_on)
    # The recipes the host is claimed for, oldest claim first.
    reserved: list[Claim] = field(default_factory=list)

    @classmethod
    def of(cls, host: Host, *, job=None) -> Occupancy:
        """For the worker running the benchmark job `job`, only the jobs ahead of it count."""
        claims = gathered(host_claims, sender=cls, host=host, job=job)
        claims.sort(key=lambda claim: claim.since)
        return cls(host, colocation.runs_on(host), claims)

    @property
    def active(self) -> Run | None:
        """The oldest active run."""
        return self.runs[0] if self.runs else None

    def reusable(self, recipe_id: int) -> Run | None:
        """The active run a benchmark job for this recipe would reuse."""
        for run in self.runs:
            if run.recipe_id == recipe_id and run.state != RunState.STOPPING:
                return run
        return None

    def refusal(self, recipe: Recipe, *, reuse: bool = False, alone: bool = False) -> str | None:
        """Why a run of the recipe cannot start here now: active runs it may not join
        (unless `reuse` and one is of this recipe; `alone`: a benchmark job's start, which
        joins none), or claims for another recipe."""
        host, runs = self.host, self.runs
        if reuse and self.reusable(recipe.pk):
            return None
        same = next((r for r in runs if r.recipe_id == recipe.pk and r.state != RunState.STOPPING),
                    None)  # fmt: skip
        if same is not None and host.max_runs > 1:
            return (f"{host.name} already runs “{recipe}” (run {same.pk}, "
                    f"{same.get_state_display().lower()}).")  # fmt: skip
        if alone and runs:
            first = runs[0]
            return (f"{host.name} already runs “{first.recipe}” "
                    f"({first.get_state_display().lower()}): stop it first — a benchmark job "
                    "takes its Spark alone.")  # fmt: skip
        why = colocation.refusal(host, recipe, runs)
        if why is not None:
            return why
        others = self._others(recipe.pk)
        if others:
            first = others[0]
            return (
                f"{host.name} is reserved for “{first.recipe}”: {first.words()} queued or "
                "running for it will start it. Wait until they finish (or cancel them) — a "
                "benchmark job takes its Spark alone."
            )
        return None

    def job_refusal(self, recipe_id: int) -> str | None:
        """Why a benchmark job for the recipe cannot be queued here: only a pinned run of
        another recipe. An unpinned one is swapped when the job's turn comes, and jobs for
        other recipes ahead of it swap theirs in their own turn (the host's queue is FIFO)."""
        for active in self.runs:
            if self._swapped(active, recipe_id) and active.pinned:
                return pinned_words(active, self.host)
        return None

    def waiting_for(self, recipe: Recipe) -> str | None:
        """What a benchmark job for the recipe, queued behind these claims, waits for
        before its turn ("waiting for spark-1 to be free: …"); None when nothing of another
        recipe holds the host (the job reuses the run, or starts its recipe on an idle host)."""
        host = self.host
        others = self._others(recipe.pk)
        if others:
            first = others[0]
            more = "" if len(others) == 1 else f" (and jobs for {len(others) - 1} other recipes)"
            return (
                f"waiting for {host.name} to be free: {first.words()} for “{first.recipe}”"
                f"{more} ahead of it; each job swaps in its recipe when its turn comes."
            )
        mine = self.reusable(recipe.pk)
        foreign = [r for r in self.runs if r is not mine]
        if not foreign:
            return None
        active = foreign[0]
        if active.state == RunState.STOPPING and len(foreign) == 1:
            return (
                f"waiting for {host.name} to be free: its run of “{active.recipe}” is stopping; "
                f"when this job's turn comes, it starts “{recipe}”."
            )
        words = (
            f"waiting for {host.name} to be free: it runs “{active.recipe}” "
            f"({active.get_state_display().lower()}); when this job's turn comes, it stops "
            f"that run and starts “{recipe}”."
        )
        if len(foreign) > 1:
            words = (f"waiting for {host.name} to be free: it runs {len(foreign)} other models "
                     f"({', '.join(f'“{r.recipe}”' for r in foreign)}); when this job's turn "
                     f"comes, it stops them (a benchmark takes its Spark alone) and "
                     f"{'reuses' if mine else 'starts'} “{recipe}”.")  # fmt: skip
        elif mine is not None:
            words = words.replace(f"starts “{recipe}”", f"reuses “{recipe}”")
        if active.pinned:
            words += (
                f" Run {active.pk} has been pinned since: unless an operator unpins it, this "
                "job fails when its turn comes."
            )
        return words

    def _others(self, recipe_id: int) -> list[Claim]:
        return [claim for claim in self.reserved if claim.recipe.pk != recipe_id]

    @staticmethod
    def _swapped(active: Run, recipe_id: int) -> bool:
        """Whether a job for the recipe would stop the active run (one of another recipe,
        not already stopping)."""
        return active.recipe_id != recipe_id and active.state != RunState.STOPPING


def pinned_words(run: Run, host: Host) -> str:
    """Why a benchmark job for another recipe does not replace this pinned run."""
    by = f" by {run.pinned_by.get_username()}" if run.pinned_by else ""
    return (
        f"{host.name} runs “{run.recipe}” (run {run.pk}), pinned{by}: benchmark jobs for "
        "other recipes do not replace a pinned run. An operator can unpin it on the run's "
        f"page (or POST /api/v1/runs/{run.pk}/unpin); or queue the job on another Spark."
    )


def busy_refusal(host: Host, recipe: Recipe, *, reuse: bool = False, job=None) -> str | None:
    """Why the host cannot take a run of this recipe now (None when it can). An active run
    makes it busy (unless `reuse`: a benchmark job for the recipe already running there
    reuses that run); so do claims for another recipe (`Occupancy`: benchmark jobs queued
    or running for it reserve the host for theirs). For the worker running `job` — its
    turn on the host's FIFO queue — only the active run counts: jobs queued ahead of it
    for other recipes swap theirs in their own turn."""
    return _occupancy(host, job).refusal(recipe, reuse=reuse, alone=job is not None)


def _occupancy(host: Host, job) -> Occupancy:
    """What a start on the host meets: for the worker running `job`, its runs alone."""
    return Occupancy(host, colocation.runs_on(host)) if job is not None else Occupancy.of(host)


def can_override_fit(user) -> bool:
    """Operators (and admins) may start a recipe the planner says does not fit; members
    never (they cannot start runs, and a benchmark job never overrides)."""
    return user is not None and user.is_authenticated and user.has_perm(OPERATE_RUNS)


@dataclass(frozen=True)
class Admission:
    """What admission decided besides "yes": the planner's verdict and whether an
    operator overrode a "does not fit"."""

    verdict: str
    overridden: bool = False


def fit_check(*, recipe: Recipe, host: Host, user=None, fit_confirmation: str = "") -> Admission:
    """vLLM's own verdict for the recipe on this host when the panel knows the model (its
    stored config.json: apps/recipes/startup.py) — refused only where vLLM would refuse —
    else the planner's. A refusal (does_not_fit) stands unless an operator confirms by
    typing the recipe's name."""
    predicted = vllm_prediction(recipe, host)
    prediction = predicted.get("prediction")
    if prediction is not None:
        if prediction.starts:
            return Admission(str(planner.Verdict.FITS))
        reason = f"vLLM {predicted['version']} would refuse it: {prediction.error}"
        return _admit_fit(recipe, planner.Verdict.DOES_NOT_FIT, reason, f"on {host.name}", user,
                          fit_confirmation)  # fmt: skip
    try:
        result = recipe.plan(host.spec())
    except ValueError:  # inputs the planner refuses are refused before this, by the flags
        return Admission(str(planner.Verdict.UNKNOWN))
    reason = planner.does_not_fit_reason(result)
    return _admit_fit(recipe, result.verdict, reason, f"on {host.name}", user, fit_confirmation)


def _admit_fit(
    recipe: Recipe, verdict, reason: str | None, where: str, user, fit_confirmation: str
) -> Admission:
    """The verdict, or the refusal of a "does not fit" unless an operator typed the
    recipe's name to override it (recorded on the run)."""
    if reason is None:
        return Admission(str(verdict))
    typed = (fit_confirmation or "").strip()
    if typed and typed == recipe.name and can_override_fit(user):
        return Admission(str(verdict), overridden=True)
    message = f"The planner says “{recipe.name}” does not fit {where}: {reason}"
    if not typed:
        message += (
            " An operator can start it anyway by typing the recipe's name to confirm (the "
            "override is recorded on the run)."
        )
    elif not can_override_fit(user):
        message += " Only an operator can override the planner."
    else:
        message += f" The confirmation must be the recipe's name, “{recipe.name}”, exactly."
    raise RunRefused(message, "does_not_fit")


def recipe_environment(recipe: Recipe) -> dict[str, str]:
    """The recipe's environment for its server: each variable judged again by the rules
    (a row saved before a rule changed is not trusted), never one the worker sets itself."""
    env = recipe.env if isinstance(recipe.env, dict) else {}
    return {
        str(name): str(value) for name, value in env.items()
        if name not in settings.VLLM_ENV and not variable_problem(name, value)
    }  # fmt: skip


def mods_refusal(recipe: Recipe, host: Host, *, pair: bool = False) -> None:
    """A recipe that asks for code in its container (sparkrun mods, patches, commands around
    vLLM) starts only where every mod is reviewed and approved for the host
    (apps/runs/mods.py; docs/recipes.md, Mods)."""
    try:
        bundles_for(recipe, host, pair=pair)
    except ModRefused as exc:
        raise RunRefused(str(exc), exc.code) from None


def folders_refusal(recipe: Recipe, host: Host) -> None:
    """A recipe that reads a folder (a draft model at /drafter…) starts only on a host whose
    admin gave it a model folder there: SparkPanel never mounts a recipe's own volumes."""
    missing = [f for f in recipe.folders or () if isinstance(f, dict)
               and f.get("path") and host.model_folder_at(f["path"]) is None]  # fmt: skip
    if not missing:
        return
    first = missing[0]
    source = f" (its source mounted {first['source']} there)" if first.get("source") else ""
    more = f", and {len(missing) - 1} more folder(s)" if len(missing) > 1 else ""
    raise RunRefused(
        f"“{recipe.name}” reads {first['path']}{source}{more}, and {host.name} has no model "
        f"folder there. An admin adds one — “HOST_FOLDER:{first['path']}”, read-only — to "
        f"{host.name}'s model folders (Django admin → Hosts); or change the recipe to read "
        "that model from the Hugging Face Hub (docs/recipes.md, Folders).",
        "folder_missing",
    )


def pair_for_recipe(recipe: Recipe, host: Host) -> SparkPair | None:
    """The pair a tensor-parallel-2 recipe runs on when started on `host` (the pair it is
    in, head or worker); None for a one-Spark recipe. Refuses TP 2 off a pair."""
    if not needs_pair(recipe.world_size):
        return None
    found = pair_of(host)
    if found is None:
        raise RunRefused(
            f"“{recipe.name}” runs with tensor parallel 2, on a pair of Sparks, and "
            f"{host.name} is not in a pair. An admin links two Sparks as a pair (admin → "
            "Spark pairs; docs/two-sparks.md).",
            "needs_pair",
        )
    bridged = [
        h.name for h in found.hosts
        if h.engine == Host.Engine.DOCKER and h.docker_network != Host.DockerNetwork.HOST
    ]  # fmt: skip
    if bridged:
        raise RunRefused(
            f"The pair {found.name} needs the hosts' network on both Sparks (Ray, NCCL and "
            f"vLLM's ranks talk over the link addresses), and {' and '.join(bridged)} "
            f"give{'s' if len(bridged) == 1 else ''} containers their own network. An admin "
            "sets the container network to Host (docs/two-sparks.md).",
            "pair_network",
        )
    return found


def _peer_worker_refusal(peer: Host) -> str | None:
    """A pair's worker Spark must have a live worker: it starts its half."""
    if peer.online:
        return None
    try:
        consumers = {q for queues in workers_state(timeout=1.0).values() for q in queues}
    except Exception:
        consumers = set()
    if peer.queue in consumers:
        return None
    return (
        f"{peer.name}, the pair's worker Spark, has no live worker (its queue {peer.queue} "
        "is not consumed): it must start its half of the run. Start its worker, or check "
        "that the Spark is on (the Hosts page)."
    )


def pair_fit_check(
    *, recipe: Recipe, pair: SparkPair, user=None, fit_confirmation: str = ""
) -> Admission:
    """The planner's verdict for a TP-2 recipe on a pair: each Spark planned with its own
    spec (half the weights and KV each); the worse side decides, and is named."""
    try:
        result = plan_pair(recipe.architecture(), recipe.flags(),
                           Side(pair.head.name, "head", pair.head.spec()),
                           Side(pair.worker.name, "worker", pair.worker.spec()))  # fmt: skip
    except ValueError:
        return Admission(str(planner.Verdict.UNKNOWN))
    side, worst = result.worst()
    reason = planner.does_not_fit_reason(worst)
    where = f"on the pair {pair.name} (on {side.name}, its {side.role})"
    return _admit_fit(recipe, result.verdict, reason, where, user, fit_confirmation)


def memory_refusal(host: Host, recipe: Recipe, *, freed_bytes: float = 0) -> str | None:
    """Why the host's measured memory cannot take the recipe's pool now (None when it
    can): the start's own rule, for callers that weigh places (`freed_bytes`: memory a
    stop they plan would give back)."""
    try:
        _memory_refusal(host, recipe, freed_bytes=freed_bytes)
    except RunRefused as exc:
        return str(exc)
    return None


def pool_bytes(recipe: Recipe, host: Host) -> float:
    """The vLLM pool a run of the recipe takes on the host: utilization × total."""
    return float(recipe.gpu_memory_utilization) * host.spec().cuda_visible_gib * GIB


def _memory_refusal(host: Host, recipe: Recipe, *, freed_bytes: float = 0) -> None:
    try:
        memory, _source = host.measured_memory()
    except MeminfoError as exc:
        raise RunRefused(f"cannot measure {host.name}'s memory: {exc}", "memory_unknown") from None
    spec = host.spec()
    pool = pool_bytes(recipe, host)
    needed = pool + spec.freeze_margin_gb * GB
    available = memory.available_bytes + freed_bytes
    if available < needed:
        # The same arithmetic as the host page's "largest utilization a start can ask for now".
        panel, _gate = startable_now(int(available), spec.cuda_visible_gib,
                                     spec.freeze_margin_gb)  # fmt: skip
        largest = (f"the largest a start can ask for there now is {panel}" if panel > 0
                   else "no start fits there now")  # fmt: skip
        raise RunRefused(
            f"{host.name} has {available / GB:.1f} GB available"
            f"{' once the runs it replaces stop' if freed_bytes else ''}; this recipe's vLLM "
            f"pool takes {pool / GB:.1f} GB ({recipe.utilization_text} × "
            f"{spec.cuda_visible_gib} GiB) and {spec.freeze_margin_gb:g} GB must stay free, so it "
            f"needs {needed / GB:.1f} GB ({largest}). Stop what else is using memory or lower "
            "the utilization.",
            "not_enough_memory",
        )


def retired_refusal(host: Host, pair: SparkPair | None = None) -> None:
    """A retired host (or a pair with a retired side) takes nothing new: retiring keeps a
    host's history without offering it (apps/hosts/services.py)."""
    for side in pair.hosts if pair is not None else (host,):
        refusal = side.retired_refusal()
        if refusal:
            where = f"The pair {pair.name} cannot start: " if pair is not None else ""
            raise RunRefused(where + refusal, "host_retired")


def admission_check(
    *,
    recipe: Recipe,
    host: Host,
    user=None,
    fit_confirmation: str = "",
    reuse: bool = False,
    job=None,
    pair: SparkPair | None = None,
    host_state: bool = True,
) -> Admission:
    """Every rule a start must pass, most basic first; returns the planner's verdict. A
    pair run (`pair`, its head as `host`) passes each rule on both Sparks. Without
    `host_state` the rules about what the host holds now (busy, measured memory) are left
    for later: a benchmark job queued behind another recipe meets them at its turn."""
    retired_refusal(host, pair)
    try:
        check_utilization(recipe.gpu_memory_utilization)
    except FlagError as exc:  # a recipe row changed behind the validators' back
        raise RunRefused(f"this recipe cannot be started: {exc}", "unsafe_recipe") from None
    problems = contract_problems(recipe, host.contract_version)
    if problems:
        # The recipe was checked against the default host's vLLM; this host may differ.
        raise RunRefused(
            f"{host.name}'s vLLM {host.contract_version} would refuse this recipe: "
            + "; ".join(message for _, message in problems),
            "unsafe_recipe",
        )
    sides = pair.hosts if pair is not None else (host,)
    for side in sides:  # a local model or tokenizer must lie in each Spark's model directory
        try:
            argv_on(recipe, side)
        except UnsafeCommand as exc:
            raise RunRefused(
                f"this recipe cannot be started on {side.name}: {exc}", "unsafe_recipe"
            ) from None
    for side in sides if host_state else ():
        busy = busy_refusal(side, recipe, reuse=reuse, job=job)
        if busy is not None:
            raise RunRefused(busy, "host_busy")
    for side in sides:
        refusal = side.image_refusal(recipe.image)
        if refusal:
            raise RunRefused(refusal, "image_not_allowed")
    if pair is not None:
        refusal = _peer_worker_refusal(pair.worker)
        if refusal:
            raise RunRefused(refusal, "peer_offline")
        admission = pair_fit_check(recipe=recipe, pair=pair, user=user,
                                   fit_confirmation=fit_confirmation)  # fmt: skip
    else:
        admission = fit_check(recipe=recipe, host=host, user=user,
                              fit_confirmation=fit_confirmation)  # fmt: skip
    for side in sides if host_state else ():
        _memory_refusal(side, recipe)
    return admission


def run_create(
    *,
    recipe: Recipe,
    host: Host,
    user,
    restart_of: Run | None = None,
    fit_confirmation: str = "",
    job=None,
) -> Run:
    """Admission control, then the queued run row. Whoever calls this starts it. A restart
    of a run started with the fit override keeps it (an operator restarts it)."""
    if restart_of is not None and restart_of.fit_override_at and not fit_confirmation:
        fit_confirmation = recipe.name
    retired_refusal(host)  # before the pair rules: the host named is the first answer
    pair = pair_for_recipe(recipe, host)
    mods_refusal(recipe, host, pair=pair is not None)
    for spark in (pair.head, pair.worker) if pair is not None else (host,):
        folders_refusal(recipe, spark)  # each rank reads the folder on its own Spark
    if pair is not None:
        host = pair.head  # a pair run lives on its head: the Ray head and the API server
    admission = admission_check(
        recipe=recipe, host=host, user=user, fit_confirmation=fit_confirmation, job=job,
        pair=pair,
    )  # fmt: skip
    port = _free_port(host)
    try:
        argv = argv_on(recipe, host, port)
    except UnsafeCommand as exc:  # a recipe row changed behind the validators' back
        raise RunRefused(f"this recipe cannot be started: {exc}", "unsafe_recipe") from None
    if pair is not None:
        argv += [RAY_BACKEND_FLAG, "ray"]  # ranks over two nodes (sparkdomain/pair.py)
    try:
        with transaction.atomic():
            slot = _slot(host, recipe, reuse=False, job=job)
            run = Run.objects.create(
                recipe=recipe, host=host, started_by=user, port=port, image=recipe.image,
                slot=slot,
                peer_host=pair.worker if pair is not None else None,
                argv=argv, step="Waiting for the host's worker", restart_of=restart_of,
                fit_verdict=admission.verdict,
                fit_override_by=user if admission.overridden else None,
                fit_override_at=timezone.now() if admission.overridden else None,
                **_pin_of(restart_of),
            )  # fmt: skip
        # The host now serves this run (its dashboard line, its queue section), the Runs
        # lists show it, and a restarted run's open pages link to it: live.
        restart_pk = restart_of.pk if restart_of is not None else None
        transaction.on_commit(lambda: live.push_run_created(host.name, restart_pk))
        if restart_of is None:  # a restart is audited once, by run_restart
            audit.record(
                "run.start", run, user=user, after={"recipe": recipe.name, "host": host.name},
                message=f"for benchmark job {job.pk}" if job is not None else "",
            )  # fmt: skip
        return run
    except IntegrityError:
        names = " or ".join(h.name for h in (pair.hosts if pair else (host,)))
        raise RunRefused(
            f"{names} already has an active run: stop it first.", "host_busy"
        ) from None


def _slot(host: Host, recipe: Recipe, *, reuse: bool, job) -> int:
    """Inside the run's transaction: the host's row locked (where the database can), the
    host's runs read again and judged again (a start admitted a moment ago counts), and
    the smallest free slot, which the database lets one active run hold."""
    locked = Host.objects.select_for_update().filter(pk=host.pk).first()
    if locked is not None and locked.retired:  # retired since admission (host_retire locks too)
        retired_refusal(locked)
    occupancy = _occupancy(host, job)
    busy = occupancy.refusal(recipe, reuse=reuse, alone=job is not None)
    if busy is not None:
        raise RunRefused(busy, "host_busy")
    return colocation.free_slot(host, occupancy.runs)


def run_start(
    *, recipe: Recipe, host: Host, user, restart_of: Run | None = None, fit_confirmation: str = ""
) -> Run:
    """Admit and queue a run: the host's own worker starts it."""
    from apps.runs.tasks import start_run  # here: tasks → runner → this module

    run = run_create(
        recipe=recipe, host=host, user=user, restart_of=restart_of,
        fit_confirmation=fit_confirmation,
    )  # fmt: skip
    # The run's own host: a pair run lives on its pair's head, whichever Spark was named.
    transaction.on_commit(lambda: start_run.apply_async(args=[run.pk], queue=run.host.queue))
    return run


def run_stop(*, run: Run, reason: str = "", unless_pinned: bool = False, here: bool = False) -> Run:
    """Ask a run to stop. While it starts, its start task sees the state and stops it; a
    ready run is stopped by a task on the host's queue — unless `here`: the caller runs on
    that queue (a benchmark job's swap) and stops it itself with runner.stop, as a task
    would only wait behind it. `reason` is kept on the run (`stop_reason`: "stopped to run
    benchmark job 12"); `unless_pinned` refuses a pinned run (RunRefused "pinned") in the
    same conditional UPDATE that stops it, so a pin set a moment ago wins."""
    from apps.runs.tasks import stop_run  # here: tasks → runner → this module

    run.refresh_from_db()
    if not run.is_active or run.state == RunState.STOPPING:
        return run
    was_starting = run.state in STARTING_STATES
    fields = {"step": f"Stopping: {reason}"[:200], "stop_reason": reason[:200]} if reason else {}
    # Who asked (the request's user, as the audit row says; none for the panel itself).
    asker = getattr(audit_context.current().user, "pk", None)
    fields |= {"stopped_by_id": asker, "stop_requested_at": timezone.now()}
    try:
        run.transition(RunState.STOPPING, only_if={"pinned": False} if unless_pinned else None,
                       **({"step": "Stopping"} | fields))  # fmt: skip
    except InvalidTransition:
        run.refresh_from_db()
        if unless_pinned and run.pinned and run.is_active and run.state != RunState.STOPPING:
            raise RunRefused(pinned_words(run, run.host), "pinned") from None
        return run  # moved meanwhile (stopping, stopped or failed): nothing more to ask
    if not was_starting and not here:
        transaction.on_commit(lambda: stop_run.apply_async(args=[run.pk], queue=run.host.queue))
    audit.record("run.stop", run, message=reason)
    return run


def _pin_of(restart_of: Run | None) -> dict:
    """A restart of a pinned run is pinned too (by the same operator)."""
    if restart_of is None or not restart_of.pinned:
        return {}
    return {"pinned": True, "pinned_by_id": restart_of.pinned_by_id,
            "pinned_at": restart_of.pinned_at}  # fmt: skip


PINNABLE_STATES = [state for state in ACTIVE_STATES if state != RunState.STOPPING]


def run_pin(*, run: Run, user, pinned: bool = True) -> Run:
    """Pin (or unpin) a run: benchmark jobs for other recipes never stop a pinned run to
    swap in theirs (they are refused up front, or fail at their turn). Operators only;
    only a run that is starting or ready can be pinned (RunRefused "not_active"); pinning
    a pinned run, or unpinning one that is not, changes nothing."""
    if user is None or not user.has_perm(OPERATE_RUNS):
        raise RunRefused("Only an operator can pin or unpin a run.", "forbidden")
    if pinned:
        changed = Run.objects.filter(pk=run.pk, state__in=PINNABLE_STATES, pinned=False).update(
            pinned=True, pinned_by=user, pinned_at=timezone.now()
        )
    else:
        changed = Run.objects.filter(pk=run.pk, pinned=True).update(
            pinned=False, pinned_by=None, pinned_at=None
        )
    run.refresh_from_db()
    if pinned and not run.pinned:
        raise RunRefused(
            f"Run {run.pk} is {run.get_state_display().lower()}: only a run that is starting "
            "or ready can be pinned.",
            "not_active",
        )
    if changed:
        audit.record("run.pin" if pinned else "run.unpin", run, user=user)
        host = run.host.name
        # Its page and list row, and its host's queue (what queued jobs wait for), live.
        transaction.on_commit(lambda: (live.push_run(run.pk), live.push_host(host)))
    return run


def run_restart(*, run: Run, user, countdown: float = 0, reason: str = "") -> Run:
    """Restart a run: an active one is stopped and its recipe started again as a new run by
    a task on the host's queue (after `countdown` seconds: the hang policy's backoff); a
    finished one is simply started again (admission applies). `user` None: the panel
    itself (the host agent, for a hung run)."""
    from apps.runs.tasks import restart_run  # here: tasks → runner → this module

    run.refresh_from_db()
    audit.record("run.restart", run, user=user, message=reason)
    if not run.is_active:
        return run_start(recipe=run.recipe, host=run.host, user=user, restart_of=run)
    if run.state != RunState.STOPPING:
        run.transition(RunState.STOPPING, step="Stopping to restart")
    transaction.on_commit(
        lambda: restart_run.apply_async(
            args=[run.pk, user.pk if user else None], queue=run.host.queue, countdown=countdown
        )
    )
    return run

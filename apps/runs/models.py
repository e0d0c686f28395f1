from __future__ import annotations

import secrets
from datetime import datetime

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import salted_hmac

from apps.hosts.clock import run_clock
from apps.hosts.models import Host
from apps.recipes.signals import capacity_story
from apps.runs.signals import run_state_changed


class InvalidTransition(Exception):
    """A state change the state machine does not allow, or that lost a race."""


class RunState(models.TextChoices):
    QUEUED = "queued", "Queued"
    PULLING = "pulling", "Pulling image"
    DOWNLOADING = "downloading", "Downloading weights"
    STARTING = "starting", "Starting"
    LOADING = "loading", "Loading weights"
    COMPILING = "compiling", "Compiling and capturing graphs"
    WARMING = "warming", "Warming up"
    READY = "ready", "Ready"
    STOPPING = "stopping", "Stopping"
    STOPPED = "stopped", "Stopped"
    FAILED = "failed", "Failed"


S = RunState
TRANSITIONS: dict[str, set[str]] = {
    S.QUEUED: {S.PULLING, S.DOWNLOADING, S.STARTING, S.STOPPING, S.FAILED},
    S.PULLING: {S.DOWNLOADING, S.STARTING, S.STOPPING, S.FAILED},
    S.DOWNLOADING: {S.STARTING, S.STOPPING, S.FAILED},
    S.STARTING: {S.LOADING, S.COMPILING, S.WARMING, S.STOPPING, S.FAILED},
    S.LOADING: {S.COMPILING, S.WARMING, S.STOPPING, S.FAILED},
    S.COMPILING: {S.WARMING, S.STOPPING, S.FAILED},
    S.WARMING: {S.READY, S.STOPPING, S.FAILED},
    S.READY: {S.STOPPING, S.FAILED},
    S.STOPPING: {S.STOPPED, S.FAILED},
    S.STOPPED: set(),
    S.FAILED: set(),
}
ACTIVE_STATES = [s for s in RunState.values if s not in (S.STOPPED, S.FAILED)]
STARTING_STATES = [
    S.QUEUED, S.PULLING, S.DOWNLOADING, S.STARTING, S.LOADING, S.COMPILING, S.WARMING,
]  # fmt: skip
# The phases the model server itself paces (a simulated one N× faster than a real Spark).
SERVER_PACED_STATES = frozenset(s.value for s in (S.STARTING, S.LOADING, S.COMPILING, S.WARMING))


def _push_run_changed(run_id: int, host_id: int, state: str = "") -> None:
    """Every state change, whoever made it (web, API, CLI, worker, watchdog), reaches open
    pages once committed: the run's elements and its host's (apps/runs/live.py)."""

    from apps.runs import live  # imports this module (it renders runs)

    def push() -> None:
        run_state_changed.send(sender=Run, run_id=run_id, state=state)
        live.push_run(run_id)
        name = Host.objects.filter(pk=host_id).values_list("name", flat=True).first()
        if name:
            live.push_host(name)

    transaction.on_commit(push)


def new_api_key_salt() -> str:
    return secrets.token_hex(16)


API_KEY_PURPOSE = "sparkpanel.runs.api_key"


class RunQuerySet(models.QuerySet):
    def active(self):
        return self.filter(state__in=ACTIVE_STATES)

    def on(self, host):
        """The runs that use this host: its own, and pair runs it is the worker side of."""
        return self.filter(Q(host=host) | Q(peer_host=host))


class Run(models.Model):
    """A recipe started on a host by a user, from queued to stopped (or failed)."""

    recipe = models.ForeignKey("recipes.Recipe", on_delete=models.PROTECT, related_name="runs")
    host = models.ForeignKey("hosts.Host", on_delete=models.PROTECT, related_name="runs")
    # A pair run (tensor parallel 2, docs/two-sparks.md): `host` is the pair's head (the Ray
    # head and the API server), `peer_host` its worker; each side's Ray node is a handle of
    # its own, started by that side's worker. Blank on a one-Spark run.
    peer_host = models.ForeignKey(
        "hosts.Host", null=True, blank=True, on_delete=models.PROTECT, related_name="peer_runs"
    )
    ray_handle = models.CharField(max_length=200, blank=True)  # the head's Ray node
    peer_handle = models.CharField(max_length=200, blank=True)  # the worker's Ray node
    # What the worker Spark's own worker reports of its half (it alone writes this): its
    # step, and a failure with its Ray log lines and advice (apps/runs/pair.py).
    peer_state = models.JSONField(default=dict, blank=True)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="runs"
    )
    state = models.CharField(
        max_length=16, choices=RunState.choices, default=S.QUEUED, db_index=True
    )
    argv = models.JSONField(default=list)  # the exact `vllm serve` vector
    image = models.CharField(max_length=255)
    # What the image tag meant when this run started (a nightly tag moves under you): the
    # registry's manifest digest, the reference that pulls exactly it, the local image id.
    # Blank on a process host (no image: its vLLM version comes from the log, in `facts`).
    image_digest = models.CharField(max_length=80, blank=True)
    image_pinned = models.CharField(max_length=400, blank=True)
    image_id = models.CharField(max_length=80, blank=True)
    port = models.PositiveIntegerField()
    # The run's own `--api-key` is derived from this salt and SECRET_KEY (`api_key`): only
    # the panel can compute it, it reaches the server through its environment
    # (VLLM_API_KEY), never its argv, and it is never stored. Blank on runs started before
    # the gateway (their servers ask for no key).
    api_key_salt = models.CharField(max_length=64, blank=True, default=new_api_key_salt)
    handle = models.CharField(max_length=200, blank=True)
    percent = models.FloatField(default=0)
    step = models.CharField(max_length=200, blank=True)
    facts = models.JSONField(default=dict, blank=True)
    timings = models.JSONField(default=dict, blank=True)  # state -> {"start": iso, "end": iso}
    cold_ttft_s = models.FloatField(null=True, blank=True)
    warm_ttft_s = models.FloatField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    failure_advice = models.TextField(blank=True)
    failure_log = models.TextField(blank=True)
    log_cursor = models.BigIntegerField(default=0)
    # The server log's last lines as the worker saw them (a container's log lives on the
    # Spark; pages read it from here).
    log_tail = models.TextField(blank=True)
    restart_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="restarts"
    )
    # The planner's verdict for the recipe on the host when it was admitted, and who
    # overrode a "does not fit" by typing the recipe's name (docs/runs.md).
    fit_verdict = models.CharField(max_length=16, blank=True)
    fit_override_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="fit_overrides",
    )  # fmt: skip
    fit_override_at = models.DateTimeField(null=True, blank=True)
    # Pinned by an operator: benchmark jobs for other recipes never stop it to swap in theirs
    # (they are refused up front, or fail at their turn); operators still stop it by hand.
    pinned = models.BooleanField(default=False)
    pinned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )  # fmt: skip
    pinned_at = models.DateTimeField(null=True, blank=True)
    # Why the panel stopped it for other work ("stopped to run benchmark job 12"); blank
    # when an operator, the watchdog or a failure ended it (each says so elsewhere).
    stop_reason = models.CharField(max_length=200, blank=True)
    # Who asked it to stop, and when (blank: the panel itself — an idle unload, a job's swap,
    # the guard; the audit log has the same row).
    stopped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )  # fmt: skip
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    # Started by a request for an on-demand model (apps/gateway/catalog.py): stopped again
    # when idle; an operator's own start is left alone unless the catalog says otherwise.
    on_demand = models.BooleanField(default=False)
    # Which of its host's `max_runs` places the run holds while active (0 … max_runs - 1;
    # always 0 on a host that runs one model at a time).
    slot = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            # The second line of defence behind admission control: one active run a slot of
            # a host (a host runs `max_runs` models side by side, each in a slot of its own:
            # apps/runs/colocation.py).
            models.UniqueConstraint(
                fields=["host", "slot"],
                condition=Q(state__in=ACTIVE_STATES),
                name="one_active_run_per_host_slot",
            ),
            # ...and for the worker side of pair runs (admission checks a host on either
            # side under a lock: apps/runs/services.py).
            models.UniqueConstraint(
                fields=["peer_host"],
                condition=Q(state__in=ACTIVE_STATES),
                name="one_active_pair_run_per_peer_host",
            ),
            models.CheckConstraint(condition=~Q(host=F("peer_host")), name="pair_run_two_hosts"),
        ]

    def __str__(self) -> str:
        return f"{self.recipe} on {self.host} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("run-detail", args=[self.pk])

    @property
    def endpoint(self) -> str:
        return f"http://{self.host.advertise_host}:{self.port}"

    @property
    def local_endpoint(self) -> str:
        """The endpoint as the panel's own processes reach it (a server bound to all
        interfaces is reached on loopback)."""
        return self.endpoint.replace("//0.0.0.0:", "//127.0.0.1:")

    @property
    def api_key(self) -> str:
        """The key this run's server demands on /v1 (vLLM's --api-key, given as
        VLLM_API_KEY); "" for a run started without one. Rotating SECRET_KEY changes it:
        restart the running models afterwards (docs/gateway.md)."""
        if not self.api_key_salt:
            return ""
        return salted_hmac(API_KEY_PURPOSE, self.api_key_salt, algorithm="sha256").hexdigest()

    @property
    def upstream_headers(self) -> dict[str, str]:
        """The headers the panel's own requests to this run's server carry."""
        key = self.api_key
        return {"authorization": f"Bearer {key}"} if key else {}

    @property
    def served_name(self) -> str:
        """The name the panel asks this run's server for (its first served name)."""
        return self.recipe.public_name

    @property
    def is_pair(self) -> bool:
        return self.peer_host_id is not None

    def hosts(self) -> list:
        """The Sparks this run uses: its host, and its pair's worker."""
        return [self.host, self.peer_host] if self.peer_host_id else [self.host]

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    def transition(self, to: str, *, only_if: dict | None = None, **fields) -> None:
        """Move to `to` if the state machine allows it and nobody moved the row meanwhile
        (a conditional UPDATE: a second worker cannot apply the same change twice).
        `only_if` adds conditions to that UPDATE (e.g. ``{"pinned": False}``: a run pinned
        a moment ago is not stopped for a benchmark job's swap)."""
        if to not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"run {self.pk}: {self.state} → {to} is not allowed")
        now = timezone.now().isoformat()
        timings = dict(self.timings)
        if self.state in timings:
            timings[self.state] = {**timings[self.state], "end": now}
        timings[to] = {"start": now}
        updated = Run.objects.filter(pk=self.pk, state=self.state, **(only_if or {})).update(
            state=to, timings=timings, updated_at=timezone.now(), **fields
        )
        if not updated:
            raise InvalidTransition(f"run {self.pk} changed state under us (was {self.state})")
        self.state, self.timings = to, timings
        for key, value in fields.items():
            setattr(self, key, value)
        _push_run_changed(self.pk, self.host_id, to)

    def record_image(self, identity) -> None:
        """Keep the image's digest (an engine's ImageIdentity). Once per run: a redelivered
        or adopted start keeps what the first start saw, even if the tag moved since."""
        if self.image_digest or self.image_id:
            return
        fields = {"image_digest": identity.digest, "image_pinned": identity.pinned,
                  "image_id": identity.image_id}  # fmt: skip
        Run.objects.filter(pk=self.pk).update(**fields)
        for key, value in fields.items():
            setattr(self, key, value)

    def mark_failed(self, reason: str, *, advice: str = "", log: str = "") -> None:
        self.transition(
            S.FAILED, failure_reason=reason[:2000], failure_advice=advice, failure_log=log[-20000:]
        )

    def elapsed_seconds(self) -> float:
        """Since the run was created (the time a user has been waiting)."""
        end = timezone.now() if self.is_active else self.updated_at
        return max(0.0, (end - self.created_at).total_seconds())

    def ready_after_seconds(self) -> float | None:
        """How long the start took, queued to ready (the phase timings' sum, so it agrees
        with the run page's phase table); None until the run has been ready. Shown instead
        of an "elapsed" counter that would keep counting once the model is up."""
        if "ready" not in self.timings:
            return None
        phases = self.phase_seconds()
        return sum(phases.get(state, 0.0) for state in STARTING_STATES)

    def ready_estimate(self):
        """The way to ready of a starting run — the rest of its phase, the phases to come
        as earlier ready starts of its recipe on its host took them (apps/runs/eta.py);
        None once it is ready or over."""
        from apps.runs.eta import ready_estimate  # imports this module

        return ready_estimate(self)

    def remaining_seconds(self) -> float | None:
        """Seconds until the run is ready, compile and warm-up included; None when there
        is no honest estimate (no earlier ready start to measure the phases to come by)."""
        estimate = self.ready_estimate()
        return None if estimate is None else estimate.seconds

    def capacity(self):
        """How many users this run serves: its recipe's capacity story with this run's own
        measured start and the benchmarks of it (apps/recipes/signals.py ``capacity``)."""
        return capacity_story(self.recipe, run=self)

    def plan_vs_measured(self) -> list:
        """What the planner predicted for this run beside what vLLM reported (for the run
        page; apps/runs/calibration.py)."""
        from apps.runs.calibration import run_checks

        return run_checks(self)

    @property
    def plan_predictor(self) -> str:
        """Which prediction the run page's "Plan against measured" shows: vLLM's start-up
        accounting once the model's config.json is known, else the panel planner."""
        stored = self.plan_checks.first()
        if stored is not None:
            return stored.get_predictor_display()
        from apps.runs.calibration import run_prediction

        try:
            return str(PlanCheck.Predictor(run_prediction(self)[1]).label)
        except ValueError:
            return str(PlanCheck.Predictor.PLANNER.label)

    def phase_seconds(self) -> dict[str, float]:
        """How long each finished phase took, in the host's time: the phases the server
        paces (starting to warming) run N× faster on an N× simulated host, so their wall
        seconds are scaled by its clock (apps/hosts/clock.py); queueing, pulling an image
        and stopping take as long as they took."""
        clock = run_clock(self)
        out = {}
        for state, span in self.timings.items():
            if "end" in span:
                wall = (
                    datetime.fromisoformat(span["end"]) - datetime.fromisoformat(span["start"])
                ).total_seconds()
                out[state] = clock.host_seconds(wall) if state in SERVER_PACED_STATES else wall
        return out

    def phase_rows(self) -> list[tuple[str, float, bool]]:
        """(phase, seconds, in simulated time) for the run page's phase timings."""
        simulated = self.facts_clock().simulated
        return [
            (state, seconds, simulated and state in SERVER_PACED_STATES)
            for state, seconds in self.phase_seconds().items()
        ]

    def facts_clock(self):
        """This run's clock (the speed its server started with): apps/hosts/clock.py."""
        return run_clock(self)


class Prefetch(models.Model):
    """A recipe's weights downloaded to a host's cache without starting it ("Download
    now"); the same download a run does before its start (apps/runs/weights.py)."""

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        DOWNLOADING = "downloading", "Downloading"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (State.QUEUED, State.DOWNLOADING)

    recipe = models.ForeignKey(
        "recipes.Recipe", on_delete=models.CASCADE, related_name="prefetches"
    )
    host = models.ForeignKey("hosts.Host", on_delete=models.CASCADE, related_name="prefetches")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="prefetches"
    )
    repo_id = models.CharField(max_length=200)
    revision = models.CharField(max_length=200, blank=True)  # as asked
    commit = models.CharField(max_length=64, blank=True)  # what it resolved to
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    progress = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    advice = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            # One download of a model at a time on a host (they would share the partials).
            models.UniqueConstraint(
                fields=["host", "repo_id"],
                condition=Q(state__in=["queued", "downloading"]),
                name="one_active_prefetch_per_host_model",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.repo_id} on {self.host} ({self.state})"

    @property
    def is_pair(self) -> bool:
        return self.peer_host_id is not None

    def hosts(self) -> list:
        """The Sparks this run uses: its host, and its pair's worker."""
        return [self.host, self.peer_host] if self.peer_host_id else [self.host]

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE


class PlanCheck(models.Model):
    """One number vLLM reported at a start beside what the planner predicted for that
    recipe on that host; kept per image and host, so the next plan for that image there can
    show the measured correction (sparkdomain/calibration.py has the arithmetic)."""

    class Quantity(models.TextChoices):
        KV_CACHE_GIB = "kv_cache_gib", "KV cache memory (GiB)"
        KV_CACHE_TOKENS = "kv_cache_tokens", "KV cache tokens"
        MAX_CONCURRENCY = "max_concurrency", "Maximum concurrency"
        MODEL_MEMORY_GIB = "model_memory_gib", "Model memory (GiB)"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="plan_checks")
    host = models.ForeignKey("hosts.Host", on_delete=models.CASCADE, related_name="plan_checks")
    recipe = models.ForeignKey(
        "recipes.Recipe", on_delete=models.CASCADE, related_name="plan_checks"
    )
    image = models.CharField(max_length=255)  # the tag the run named
    image_digest = models.CharField(max_length=80, blank=True)  # what the tag meant then
    vllm_version = models.CharField(max_length=64, blank=True)  # as the server's log said

    class Predictor(models.TextChoices):
        # vllm_adapter/startup: vLLM's own accounting for the run's exact vector (the model's
        # config.json and checkpoint size known); planner: the panel's capacity planner.
        VLLM = "vllm", "vLLM start-up prediction"
        PLANNER = "planner", "panel planner"

    quantity = models.CharField(max_length=24, choices=Quantity.choices)
    predictor = models.CharField(max_length=8, choices=Predictor.choices,
                                 default=Predictor.PLANNER)  # fmt: skip
    predicted = models.FloatField()
    measured = models.FloatField()
    ratio = models.FloatField(help_text="measured ÷ predicted")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["run", "quantity"], name="one_check_per_run_quantity")
        ]
        indexes = [models.Index(fields=["host", "image", "quantity", "-created_at"])]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.quantity}: {self.measured:g} vs {self.predicted:g}"


class ApprovedMod(models.Model):
    """A container mod (sparkdomain/mods.py) an admin reviewed and allowed on some hosts.

    The files are a snapshot taken when the mod was added (from a registry's mirror at its
    commit, or a folder on the panel's machine): what a start applies is exactly what was
    reviewed, whatever the source does later. A start applies a recipe's mod only when the
    mod is approved and the host is one of `hosts` (apps/runs/mods.py)."""

    name = models.CharField(
        max_length=100, unique=True,
        help_text="The mod's folder name, as recipes name it (`mods/fix-x` is `fix-x`).",
    )  # fmt: skip
    files = models.JSONField(default=dict, editable=False)  # path -> base64 of the bytes
    digest = models.CharField(max_length=64, editable=False)
    source = models.CharField(max_length=500, editable=False)
    approved = models.BooleanField(
        default=False,
        help_text="Reviewed: starts on the hosts below may run this mod's run.sh in the "
        "recipe's image before vLLM starts.",
    )
    hosts = models.ManyToManyField(
        Host, blank=True, related_name="approved_mods",
        help_text="The Sparks where a start may apply it.",
    )  # fmt: skip
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+", editable=False,
    )  # fmt: skip
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+", editable=False,
    )  # fmt: skip
    approved_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "approved mod"

    def __str__(self) -> str:
        return self.name

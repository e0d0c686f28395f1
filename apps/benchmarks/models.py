"""Benchmark suites, the team's queue of jobs, and their results."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.urls import reverse
from django.utils import timezone

from apps.benchmarks import signals
from apps.benchmarks.harness.arrivals import MAX_RAMP_S, MAX_RATE
from apps.benchmarks.harness.datasets import DatasetError, sharegpt_path
from apps.benchmarks.harness.types import (
    MAX_OUTPUT_TOKENS,
    MAX_PREFIX_GROUPS,
    MAX_PROMPT_TOKENS,
    MAX_THINK_S,
    MAX_TURNS,
)
from apps.benchmarks.plans import (
    DEPTH_ANSWER_TOKENS,
    DEPTH_QUESTION_TOKENS,
    SCENARIO_NAME_CHARS,
    default_levels,
    plan_refusal,
)

# Every number of a suite has an upper bound from the domain: a Spark serves at most 1024
# sequences (a recipe's max_num_seqs), a prompt at most MAX_PROMPT_TOKENS (and, when a job
# is queued, prompt + answer at most the recipe's max_model_len), and a job is a few dozen
# levels, not thousands.
MAX_LEVEL = 1024
MAX_LEVELS = 32
MAX_SCENARIOS = 50
MAX_SLO_TTFT_S = 3600.0
MAX_SLO_TPOT_S = 60.0


def validate_scenarios(value) -> None:
    if not isinstance(value, list) or not value:
        raise ValidationError("At least one scenario: [{name, prompt_tokens, output_tokens}].")
    if len(value) > MAX_SCENARIOS:
        raise ValidationError(f"At most {MAX_SCENARIOS} scenarios ({len(value):,} given).")
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "prompt_tokens", "output_tokens"}:
            raise ValidationError(
                "Each scenario is {name, prompt_tokens, output_tokens}: " + repr(item)[:80]
            )
        name, p, o = item["name"], item["prompt_tokens"], item["output_tokens"]
        if not isinstance(name, str) or not name or len(name) > SCENARIO_NAME_CHARS:
            raise ValidationError(
                f"A scenario's name is text of 1 to {SCENARIO_NAME_CHARS} characters: "
                + repr(name)[:80]
            )
        if not (
            type(p) is int
            and type(o) is int
            and 1 <= p <= MAX_PROMPT_TOKENS
            and 1 <= o <= MAX_OUTPUT_TOKENS
        ):
            raise ValidationError(
                f"{name}: token counts are whole numbers, 1 to {MAX_PROMPT_TOKENS:,} prompt "
                f"and 1 to {MAX_OUTPUT_TOKENS:,} generated tokens."
            )


def _increasing(value: list, what: str) -> None:
    if len(value) > MAX_LEVELS:
        raise ValidationError(f"At most {MAX_LEVELS} {what} ({len(value):,} given).")
    if value != sorted(set(value)):
        raise ValidationError(f"{what.capitalize()} must be increasing, without repeats.")


def validate_levels(value) -> None:
    if not isinstance(value, list) or not all(
        type(v) is int and 1 <= v <= MAX_LEVEL for v in value
    ):
        raise ValidationError(f"Concurrency levels are integers from 1 to {MAX_LEVEL}.")
    _increasing(value, "concurrency levels")


def validate_depths(value) -> None:
    if not isinstance(value, list) or not all(
        type(v) is int and 0 <= v <= MAX_PROMPT_TOKENS - DEPTH_QUESTION_TOKENS for v in value
    ):
        raise ValidationError(
            f"Context depths are whole numbers of tokens, 0 to {MAX_PROMPT_TOKENS:,}."
        )
    _increasing(value, "context depths")


def validate_rates(value) -> None:
    if not isinstance(value, list) or not all(
        type(v) in (int, float) and 0 < v <= MAX_RATE for v in value
    ):
        raise ValidationError(f"Request rates are numbers above 0, at most {MAX_RATE:g}/s.")
    _increasing(value, "request rates")


ARRIVAL_CHOICES = [("poisson", "Poisson"), ("gamma", "Gamma (set the burstiness)"),
                   ("constant", "Constant (evenly spaced)")]  # fmt: skip


class Suite(models.Model):
    """What a job measures: single-stream scenarios, then a sweep — of concurrency (closed
    loop) or of request rates (open loop: arrivals at a rate, docs/benchmarks.md)."""

    class SweepMode(models.TextChoices):
        CONCURRENCY = "concurrency", "Concurrency (closed loop: N users, each waits for its answer)"
        RATE = (
            "rate",
            "Request rate (open loop: requests arrive at a rate, whatever the answers do)",
        )

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    scenarios = models.JSONField(default=list, validators=[validate_scenarios])
    repetitions = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(50)],
        help_text="Measured requests per single-stream scenario.",
    )
    warmup_requests = models.PositiveSmallIntegerField(
        default=1,
        validators=[MaxValueValidator(100)],
        help_text="Unmeasured requests before each scenario and level (a sweep level warms up "
        "with at least its concurrency).",
    )
    sweep_enabled = models.BooleanField("concurrency sweep", default=True)
    sweep_prompt_tokens = models.PositiveIntegerField(
        default=1834, validators=[MinValueValidator(1), MaxValueValidator(MAX_PROMPT_TOKENS)]
    )
    sweep_output_tokens = models.PositiveIntegerField(
        default=108, validators=[MinValueValidator(1), MaxValueValidator(MAX_OUTPUT_TOKENS)]
    )
    sweep_levels = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_levels],
        help_text="Concurrency levels; empty means 1, 2, 4, … up to twice the recipe's "
        "max-num-seqs.",
    )
    sweep_mode = models.CharField(
        "sweep", max_length=12, choices=SweepMode.choices, default=SweepMode.CONCURRENCY
    )
    sweep_rates = models.JSONField(
        "request rates",
        default=list,
        blank=True,
        validators=[validate_rates],
        help_text="Requests per second for a rate sweep, increasing.",
    )
    arrival_kind = models.CharField(
        "arrivals",
        max_length=8,
        choices=ARRIVAL_CHOICES,
        default="poisson",
    )
    burstiness = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0.01), MaxValueValidator(100)],
        help_text="Gamma arrivals: below 1 burstier, above 1 smoother (as `vllm bench serve "
        "--burstiness`).",
    )
    rate_max_concurrency = models.PositiveIntegerField(
        "at most in flight",
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_LEVEL)],
        help_text="Rate sweep: requests beyond this many in flight wait (empty: no cap).",
    )
    ramp_up_s = models.FloatField(
        "ramp-up (s)",
        default=0.0,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_RAMP_S)],
        help_text="Rate sweep: each level's rate grows from 0 over this many seconds.",
    )
    arrival_seed = models.PositiveIntegerField(
        "arrival seed",
        default=0,
        validators=[MaxValueValidator(2**31 - 1)],
        help_text="The same seed sends the same arrival times and lengths (compare recipes on "
        "the same traffic).",
    )
    requests_per_level = models.PositiveSmallIntegerField(
        default=8,
        validators=[MinValueValidator(1), MaxValueValidator(10_000)],
        help_text="Measured requests per level (at least the level's concurrency).",
    )
    slo_ttft_s = models.FloatField(
        "SLO: TTFT p95 at most (s)",
        default=2.0,
        validators=[MinValueValidator(0.001), MaxValueValidator(MAX_SLO_TTFT_S)],
    )
    slo_tpot_s = models.FloatField(
        "SLO: time per output token at most (s)",
        default=0.1,
        validators=[MinValueValidator(0.0001), MaxValueValidator(MAX_SLO_TPOT_S)],
        help_text="0.1 s per token is 10 tok/s per user.",
    )
    endpoint = models.CharField(
        max_length=12,
        choices=[("chat", "Chat: /v1/chat/completions (the chat template applied)"),
                 ("completions", "Completions: /v1/completions (a plain text prompt)")],
        default="chat",
        help_text="Which OpenAI endpoint every request of the suite uses.",
    )  # fmt: skip
    context_depths = models.JSONField(
        "context-depth sweep",
        default=list,
        blank=True,
        validators=[validate_depths],
        help_text=f"Tokens of context before the same short question ({DEPTH_QUESTION_TOKENS} "
        f"tokens, {DEPTH_ANSWER_TOKENS}-token answer), one single-stream level each, e.g. 0, "
        "4096, 16384, 32768: how TTFT and decode change as a conversation grows.",
    )
    shared_prefix_groups = models.PositiveSmallIntegerField(
        "shared system prompts",
        default=0,
        validators=[MaxValueValidator(MAX_PREFIX_GROUPS)],
        help_text="0: none. N: every request opens with one of N system prompts (request i "
        "with the (i mod N)th), as a team's long shared instructions do; the prefix cache "
        "should make them cheap.",
    )
    shared_prefix_tokens = models.PositiveIntegerField(
        "shared system prompt tokens",
        default=1000,
        validators=[MinValueValidator(16), MaxValueValidator(MAX_PROMPT_TOKENS)],
        help_text="About this many tokens each (within every scenario's prompt length).",
    )
    length_kind = models.CharField(
        "lengths",
        max_length=8,
        choices=[("fixed", "Fixed: every request exactly the scenario's lengths"),
                 ("uniform", "Uniform: each drawn within ± the spread"),
                 ("normal", "Normal: standard deviation = the spread, within ±2 of it")],
        default="fixed",
    )  # fmt: skip
    length_spread = models.FloatField(
        "length spread",
        default=0.25,
        validators=[MinValueValidator(0.01), MaxValueValidator(1)],
        help_text="As a fraction of the scenario's lengths (0.25: ±25 % uniform; at most 0.5 "
        "for normal). Prompt and answer lengths vary alike; the seed below repeats them.",
    )
    sweep_dataset = models.CharField(
        "sweep requests",
        max_length=12,
        choices=[("synthetic", "Synthetic: the sweep's lengths (and the lengths setting)"),
                 ("sharegpt", "ShareGPT: real conversations' prompts and answer lengths "
                              "(vllm bench serve's dataset)")],
        default="synthetic",
        help_text="ShareGPT: each request of the sweep is a ShareGPT conversation's first "
        "question, answered with exactly its reply's length, sampled as vllm bench serve "
        "samples them (the seed below shuffles; vLLM's length filter). The scenarios and "
        "context depths stay exact-length probes.",
    )  # fmt: skip
    session_turns = models.PositiveSmallIntegerField(
        "turns per chat session",
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_TURNS)],
        help_text="1: each sweep request stands alone. 2 or more: the concurrency sweep's "
        "users hold conversations — each turn sends the whole chat so far back (the "
        "questions and the answers the server gave) plus a new question, after a think "
        "time; the answer says how many such users the recipe serves.",
    )
    think_time_s = models.FloatField(
        "think time (s)",
        default=10.0,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_THINK_S)],
        help_text="Between an answer and the user's next question (sessions only).",
    )
    followup_tokens = models.PositiveIntegerField(
        "follow-up question tokens",
        default=64,
        validators=[MinValueValidator(4), MaxValueValidator(100_000)],
        help_text="Each later question's length (sessions only; the first is the sweep's prompt).",
    )
    warm_prefix = models.BooleanField(
        "warm prefix cache",
        default=False,
        help_text="Off: every request has a unique prefix (cold prefill, the honest default).",
    )
    is_default = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-is_default", "name"]

    def __str__(self) -> str:
        return self.name

    def levels_for(self, max_num_seqs: int) -> list[int]:
        if self.sweep_levels:
            return list(self.sweep_levels)
        return default_levels(max_num_seqs)

    def plan(self) -> dict:
        """The suite as it is now: a queued job keeps this copy, whatever edits follow."""
        return {
            "suite_id": self.pk,
            "name": self.name,
            "scenarios": list(self.scenarios),
            "depths": list(self.context_depths),
            "repetitions": self.repetitions,
            "warmup_requests": self.warmup_requests,
            "sweep": {
                "enabled": self.sweep_enabled,
                "prompt_tokens": self.sweep_prompt_tokens,
                "output_tokens": self.sweep_output_tokens,
                "levels": list(self.sweep_levels),
                "requests_per_level": self.requests_per_level,
                "mode": self.sweep_mode,
                "rates": list(self.sweep_rates),
                "arrivals": {
                    "kind": self.arrival_kind,
                    "burstiness": self.burstiness,
                    "max_concurrency": self.rate_max_concurrency,
                    "ramp_up_s": self.ramp_up_s,
                    "seed": self.arrival_seed,
                },
            },
            "slo": {"ttft_s": self.slo_ttft_s, "tpot_s": self.slo_tpot_s},
            "warm_prefix": self.warm_prefix,
            "endpoint": self.endpoint,
            "lengths": (
                {"kind": self.length_kind, "spread": self.length_spread, "seed": self.arrival_seed}
                if self.length_kind != "fixed"
                else None
            ),
            "shared_prefix": (
                {"groups": self.shared_prefix_groups, "tokens": self.shared_prefix_tokens}
                if self.shared_prefix_groups
                else None
            ),
            "dataset": (
                {"kind": self.sweep_dataset, "seed": self.arrival_seed}
                if self.sweep_dataset != "synthetic"
                else None
            ),
            "sessions": (
                {
                    "turns": self.session_turns,
                    "think_s": self.think_time_s,
                    "question_tokens": self.followup_tokens,
                }
                if self.session_turns > 1
                else None
            ),
        }

    def clean(self) -> None:
        """What no recipe could run: prompts a level cannot hold (the bound against a
        recipe's max_model_len is checked when a job is queued, see `plan_refusal`)."""
        if self.length_kind == "normal" and self.length_spread > 0.5:
            raise ValidationError(
                "Normal lengths take a spread of at most 0.5 (within ±2 of it, a length stays "
                "positive)."
            )
        if (
            self.session_turns > 1
            and self.sweep_enabled
            and (self.sweep_mode == self.SweepMode.RATE or self.sweep_dataset != "synthetic")
        ):
            raise ValidationError(
                {"session_turns": "Chat sessions are a concurrency sweep of synthetic "
                 "prompts (their users are the concurrency): not a rate sweep or ShareGPT."}
            )  # fmt: skip
        if self.sweep_enabled and self.sweep_dataset == "sharegpt":
            try:
                sharegpt_path()
            except DatasetError as exc:
                raise ValidationError({"sweep_dataset": str(exc)}) from None
        if self.sweep_enabled and self.sweep_mode == self.SweepMode.RATE and not self.sweep_rates:
            raise ValidationError("A rate sweep needs at least one request rate.")
        try:
            validate_scenarios(self.scenarios)
            validate_levels(self.sweep_levels)
            validate_rates(self.sweep_rates)
            validate_depths(self.context_depths)
            # An empty level list depends on the recipe: the smallest sweep is checked here.
            refusal = plan_refusal(self.plan(), max_num_seqs=1, max_model_len=None)
        except (ValidationError, TypeError, ValueError, KeyError):
            return  # the fields' own validation says what is wrong
        if refusal is not None:
            raise ValidationError(refusal)


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    PREPARING = "preparing", "Preparing the model"
    RUNNING = "running", "Running"
    CANCELLING = "cancelling", "Cancelling"
    DONE = "done", "Done"
    CANCELLED = "cancelled", "Cancelled"
    INTERRUPTED = "interrupted", "Interrupted"
    FAILED = "failed", "Failed"


J = JobState
# A worker has the job: preparing the model, measuring, or stopping after a cancel. A job
# in one of these states whose worker is gone (killed, restarted, lost) is interrupted,
# never run twice (apps/benchmarks/lifecycle.py).
WORKING_JOB_STATES = [J.PREPARING, J.RUNNING, J.CANCELLING]
# Queued or working: the job holds its place in the host's queue (and reserves the host).
ACTIVE_JOB_STATES = [J.QUEUED, *WORKING_JOB_STATES]
FINISHED_JOB_STATES = [J.DONE, J.CANCELLED, J.INTERRUPTED, J.FAILED]


class JobQuerySet(models.QuerySet):
    def active(self):
        return self.filter(state__in=ACTIVE_JOB_STATES)


class Job(models.Model):
    """A benchmark job one member queued: a suite against a recipe on a host — or, read-only,
    results someone measured elsewhere and imported (`imported_from`: the file's format and
    name; no suite, the plan built from the file: apps/benchmarks/imports.py)."""

    suite = models.ForeignKey(
        Suite, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    recipe = models.ForeignKey("recipes.Recipe", on_delete=models.PROTECT, related_name="jobs")
    host = models.ForeignKey("hosts.Host", on_delete=models.PROTECT, related_name="jobs")
    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    queued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    state = models.CharField(
        max_length=16, choices=JobState.choices, default=J.QUEUED, db_index=True
    )
    note = models.CharField(max_length=200, blank=True)
    imported_from = models.CharField(
        max_length=240, blank=True, help_text="Imported results: the file's format and name."
    )
    # The suite as it was when queued (editing a suite never changes a queued job).
    plan = models.JSONField(default=dict)
    progress = models.JSONField(default=dict, blank=True)
    context = models.JSONField(default=dict, blank=True)  # image, argv, host, versions…
    # The digest of the image the run measured had (`context` carries the pinned reference):
    # a nightly tag moves under you, so results compare by digest, not by tag.
    image_digest = models.CharField(max_length=80, blank=True, db_index=True)
    summary = models.JSONField(default=dict, blank=True)  # capacity answer, headline numbers
    error = models.TextField(blank=True)
    queued_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-queued_at", "-pk"]

    def __str__(self) -> str:
        what = self.plan.get("name") or self.suite
        return f"job {self.pk}: {what} on {self.recipe} @ {self.host}"

    def get_absolute_url(self) -> str:
        return reverse("benchmark-job", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES

    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None

    def move(self, frm: list[str] | str, to: str, **fields) -> bool:
        """Conditional state change: applied only if the row is still in `frm` (so a
        redelivered task or a racing cancel cannot apply the same change twice)."""
        frm = [frm] if isinstance(frm, str) else frm
        updated = Job.objects.filter(pk=self.pk, state__in=frm).update(state=to, **fields)
        if updated:
            self.state = to
            for key, value in fields.items():
                setattr(self, key, value)
            _push_job_changed(self.pk)
            if to in FINISHED_JOB_STATES:  # e.g. the owner's webhooks (apps/api/apps.py)
                signals.job_finished.send(sender=Job, job=self)
        return bool(updated)


def _push_job_changed(job_id: int) -> None:
    """Every state change (queue, cancel, start, finish, fail, interrupt), whoever made it,
    reaches open pages once committed (apps/benchmarks/live.py)."""
    from apps.benchmarks import live  # imports this module (it renders jobs)

    transaction.on_commit(lambda: live.push_job(job_id))


class Result(models.Model):
    """One measured level: a single-stream scenario, or one concurrency of the sweep."""

    class Kind(models.TextChoices):
        SCENARIO = "scenario", "Single-stream scenario"
        SWEEP = "sweep", "Concurrency sweep level"
        RATE = "rate", "Request-rate level"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="results")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    scenario = models.CharField(max_length=100)
    prompt_tokens = models.PositiveIntegerField()
    output_tokens = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField()  # a rate level: its cap (0: none)
    request_rate = models.FloatField(null=True, blank=True)  # a rate level's requested rate
    ok = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    complete = models.BooleanField(default=True, help_text="False: cut short by a cancel or crash.")
    # Headline numbers (simulated seconds on a simulated host), also in `metrics`.
    ttft_p50_s = models.FloatField(null=True)
    ttft_p95_s = models.FloatField(null=True)
    ttft_p99_s = models.FloatField(null=True)
    e2e_p50_s = models.FloatField(null=True)
    decode_tps_p50 = models.FloatField(null=True)
    prefill_tps_p50 = models.FloatField(null=True)
    output_tps = models.FloatField(null=True)
    request_rps = models.FloatField(null=True)
    goodput_rps = models.FloatField(null=True)
    metrics = models.JSONField(default=dict)  # everything the harness measured
    requests = models.JSONField(default=list)  # compact per-request rows
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "kind", "concurrency", "pk"]

    def __str__(self) -> str:
        return f"{self.scenario} at {self.concurrency} (job {self.job_id})"

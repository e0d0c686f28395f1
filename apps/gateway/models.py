"""The gateway's rows: personal keys for /v1, model aliases, limits, and one usage row per
request. See docs/gateway.md."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.accounts.roles import ROLE_ORDER
from apps.recipes.models import recipes_answering_to


class LimitFields(models.Model):
    """The three limits, on a role's or user's row (Limit) and on a key (GatewayKey).
    Blank: no limit of this kind here. Enforced in Redis (apps/gateway/store.py, ADMIT)."""

    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    concurrent_streams = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests in flight at once (streamed or not)."
    )
    tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Prompt + completion tokens per UTC day."
    )

    class Meta:
        abstract = True


class GatewayKeyQuerySet(models.QuerySet):
    def live(self):
        return self.filter(revoked_at__isnull=True)


class GatewayKey(LimitFields):
    """A personal key for the panel's OpenAI endpoint (`/v1`). Only its SHA-256 digest is
    stored; the clear key is shown once. It acts as its user, with the user's role and
    limits; it may be limited to some models, may expire, and may have limits of its own
    (LimitFields, set by admins on the Limits page: a request must pass both)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gateway_keys"
    )
    name = models.CharField(max_length=100, help_text="What it is for, e.g. “Open WebUI”.")
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    # Public model names this key may use; empty: every model.
    model_names = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = GatewayKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def usable(self) -> bool:
        return self.revoked_at is None and not self.expired


class ModelAlias(models.Model):
    """A public model name operators choose (e.g. `team-default`) for a recipe: requests
    for it go to that recipe's ready runs."""

    name = models.CharField(
        max_length=128,
        unique=True,
        help_text="The name clients ask for, e.g. team-default (letters, digits, . _ - : /).",
    )
    recipe = models.ForeignKey("recipes.Recipe", on_delete=models.CASCADE, related_name="aliases")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "model aliases"

    def __str__(self) -> str:
        return f"{self.name} → {self.recipe}"

    def clean(self) -> None:
        problem = alias_name_problem(self.name, exclude=self.pk)
        if problem:
            raise ValidationError({"name": problem})


def alias_name_problem(name: str, exclude: int | None = None) -> str:
    """Why `name` cannot be a new alias, or "": an alias equal to a recipe's own name (or
    to another alias) would make one name stand for two recipes, maybe two models."""
    if ModelAlias.objects.filter(name=name).exclude(pk=exclude).exists():
        return f"The alias {name!r} exists already."
    if recipes_answering_to(name):
        return f"{name!r} is a recipe's own served name already."
    return ""


_ORIGIN = re.compile(r"^(https?)://([a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*"
                     r"|\[[0-9a-f:.]+\])(:(\d{1,5}))?$")  # fmt: skip
_DEFAULT_PORT = {"http": "80", "https": "443"}


def normalize_origin(value: str) -> str:
    """An origin as a browser sends it in `Origin`: scheme://host[:port], lower case, no
    path, no default port. ValidationError for anything else (a path, a wildcard, a key)."""
    text = str(value or "").strip().rstrip("/").lower()
    match = _ORIGIN.match(text)
    if not match or len(text) > 200:
        raise ValidationError(
            "An origin is scheme://host[:port] with http or https and nothing after it, "
            "e.g. https://openwebui.lan or http://10.0.0.5:3000 (no path, no *)."
        )
    port = match.group(7)
    if port is not None and not 0 < int(port) < 65536:
        raise ValidationError(f"{port} is not a port.")
    if port == _DEFAULT_PORT[match.group(1)]:
        text = text[: -len(port) - 1]
    return text


class AllowedOrigin(models.Model):
    """A web page origin whose browser code may call /v1 with a person's own key (CORS):
    Open WebUI's per-user Direct Connections, a team's own web tools. Admins keep the
    list (admin › Gateway › Allowed origins); the gateway answers preflights for these
    origins only. Keys still go in the Authorization header, never in a URL."""

    origin = models.CharField(
        max_length=200, unique=True,
        help_text="scheme://host[:port] as the browser shows it, e.g. https://openwebui.lan",
    )  # fmt: skip
    note = models.CharField(max_length=200, blank=True, help_text="What serves from there.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["origin"]

    def __str__(self) -> str:
        return self.origin

    def save(self, *args, **kwargs) -> None:
        self.origin = normalize_origin(self.origin)
        super().save(*args, **kwargs)

    def clean(self) -> None:
        try:
            self.origin = normalize_origin(self.origin)
        except ValidationError as exc:
            raise ValidationError({"origin": exc.messages}) from None


class OnDemand(models.Model):
    """A recipe in the on-demand catalog: a request through /v1 for its model starts it on
    a Spark when none serves it, and it is stopped again after `idle_timeout_s` without a
    request (apps/gateway/catalog.py, docs/gateway.md "Models on demand")."""

    recipe = models.OneToOneField(
        "recipes.Recipe", on_delete=models.CASCADE, related_name="on_demand"
    )
    hosts = models.ManyToManyField(
        "hosts.Host", blank=True, related_name="on_demand",
        help_text="The Sparks it may run on; none: any.",
    )  # fmt: skip
    priority = models.IntegerField(
        default=0, validators=[MinValueValidator(-100), MaxValueValidator(100)],
        help_text="-100 … 100: a load may stop an idle on-demand model of this priority or lower.",
    )  # fmt: skip
    idle_timeout_s = models.PositiveIntegerField(
        default=900, validators=[MinValueValidator(60), MaxValueValidator(7 * 86400)],
        help_text="Stopped after this many seconds without an inference request (60 s – 7 days).",
    )  # fmt: skip
    exclusive_group = models.CharField(
        max_length=64, blank=True,
        help_text="Models of one group never share a Spark (kept for co-location).",
    )  # fmt: skip
    may_replace_manual = models.BooleanField(
        default=False,
        help_text="A load may stop an idle run of this recipe that an operator started by hand.",
    )  # fmt: skip
    max_replicas = models.PositiveSmallIntegerField(
        "replicas at most", default=1, validators=[MinValueValidator(1), MaxValueValidator(8)],
        help_text="1 … 8. Above 1, another copy loads on another Spark while requests wait "
        "(or the time to first token is over the SLO below) for a minute; an extra copy "
        "stops again after 5 minutes with no request waiting.",
    )  # fmt: skip
    replica_ttft_slo_s = models.FloatField(
        "TTFT SLO (s)", null=True, blank=True,
        validators=[MinValueValidator(0.05), MaxValueValidator(600)],
        help_text="Optional: a p95 time to first token above this for a minute also adds a "
        "replica (0.05 – 600 s).",
    )  # fmt: skip
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-priority", "recipe__name"]
        verbose_name = "on-demand model"
        verbose_name_plural = "on-demand models"

    def __str__(self) -> str:
        return f"{self.recipe} (on demand)"


ROLE_CHOICES = [(role.value, role.value.title()) for role in ROLE_ORDER]


class Limit(LimitFields):
    """Limits for a role, or for one user (a user's row overrides their role's, field by
    field). Blank: no limit."""

    role = models.CharField(max_length=16, choices=ROLE_CHOICES, blank=True)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
        related_name="gateway_limit",
    )  # fmt: skip

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(role="") & Q(user__isnull=False))
                | (~Q(role="") & Q(user__isnull=True)),
                name="gateway_limit_role_xor_user",
            ),
            models.UniqueConstraint(
                fields=["role"], condition=~Q(role=""), name="gateway_limit_one_per_role"
            ),
        ]

    def __str__(self) -> str:
        return f"limits for {self.user or self.role}"


class UsageRecord(models.Model):
    """One request through the gateway (or one chat answer), written off the hot path."""

    class Source(models.TextChoices):
        GATEWAY = "gateway", "API (/v1)"
        CHAT = "chat", "Chat"

    request_id = models.CharField(max_length=40, unique=True)
    at = models.DateTimeField(db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="usage"
    )
    key = models.ForeignKey(GatewayKey, null=True, blank=True, on_delete=models.SET_NULL)
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.GATEWAY)
    endpoint = models.CharField(max_length=40)
    model = models.CharField(max_length=128, db_index=True)
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL)
    host = models.CharField(max_length=100, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    ttft_ms = models.FloatField(null=True, blank=True)
    duration_ms = models.FloatField(default=0)
    status = models.PositiveSmallIntegerField()
    cancelled = models.BooleanField(default=False)
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["user", "at"])]

    def __str__(self) -> str:
        return f"{self.user} {self.model} {self.status}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class UsageTotal(models.Model):
    """What the usage rows deleted by the retention policy added up to, per user and model
    (apps/gateway/usage.py::prune): the panel's /metrics counters count these too, so they
    never go down when old rows go."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    model = models.CharField(max_length=128)
    requests = models.PositiveBigIntegerField(default=0)
    errors = models.PositiveBigIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    through = models.DateTimeField(help_text="The newest deleted row's time.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "model"], name="usage_total_user_model")
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.model} up to {self.through:%Y-%m-%d}"

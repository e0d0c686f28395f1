"""Saved chat conversations with a running model, per user."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse

from apps.chat.sides import verdict
from apps.hosts.clock import REAL, run_clock
from apps.runs.models import RunState


class Comparison(models.Model):
    """One prompt sent to two or three ready runs at once (the side-by-side page): each
    column is a Conversation of its own (so it keeps its history and can be opened alone),
    linked here in column order. The team's votes on its answers are ArenaVotes."""

    MAX_COLUMNS = 3

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="comparisons"
    )
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.title or f"Comparison {self.pk}"

    def get_absolute_url(self) -> str:
        return reverse("chat-compare", args=[self.pk])


class Conversation(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="conversations"
    )
    recipe = models.ForeignKey(
        "recipes.Recipe",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="conversations",
    )
    title = models.CharField(max_length=200, blank=True)
    system_prompt = models.TextField(blank=True, max_length=20_000)
    temperature = models.FloatField(
        default=0.7, validators=[MinValueValidator(0), MaxValueValidator(2)]
    )
    top_p = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.01), MaxValueValidator(1)]
    )
    max_tokens = models.PositiveIntegerField(
        default=1024, validators=[MinValueValidator(1), MaxValueValidator(32768)]
    )
    # A read-only link for teammates (who still sign in): empty when not shared.
    share_token = models.CharField(max_length=43, blank=True, default="")
    comparison = models.ForeignKey(
        Comparison, null=True, blank=True, on_delete=models.SET_NULL, related_name="columns"
    )
    column = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["share_token"],
                condition=~models.Q(share_token=""),
                name="chat_conversation_share_token_unique",
            )
        ]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"

    def get_absolute_url(self) -> str:
        return reverse("chat-conversation", args=[self.pk])

    @property
    def run_ready(self) -> bool:
        """Can it be answered now: its run is there and ready."""
        return self.run is not None and self.run.state == RunState.READY


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user", "You"
        ASSISTANT = "assistant", "Model"

    class Status(models.TextChoices):
        STREAMING = "streaming", "Streaming"
        COMPLETE = "complete", "Complete"
        STOPPED = "stopped", "Stopped"
        ERROR = "error", "Error"

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField(blank=True)
    reasoning = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.COMPLETE)
    error = models.TextField(blank=True)
    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    ttft_s = models.FloatField(null=True, blank=True)
    tok_s = models.FloatField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "created_at", "pk"]

    def __str__(self) -> str:
        return f"{self.role} message {self.pk}"

    def as_dict(self) -> dict:
        return {
            "id": self.pk,
            "role": self.role,
            "content": self.content,
            "reasoning": self.reasoning,
            "status": self.status,
            "error": self.error,
            "ttft_s": self.ttft_s,
            "tok_s": self.tok_s,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "clock_label": self.clock().label,
        }

    def clock(self):
        """The clock of this answer's TTFT and tok/s: its run's (apps/hosts/clock.py)."""
        return run_clock(self.run) if self.run_id else REAL


class ArenaVote(models.Model):
    """Which column of a comparison answered one turn better (winner_column None: a tie).
    The recipes are copied in at vote time (`recipes`, one id per column, None for a
    column whose run had no recipe): the arena table counts wins per pair of recipes even
    after a run or a conversation is gone."""

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="votes")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    turn = models.PositiveIntegerField()
    winner_column = models.PositiveSmallIntegerField(null=True, blank=True)
    recipes = models.JSONField(default=list)
    prompt = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["comparison", "turn"], name="chat_vote_once_per_turn")
        ]

    def __str__(self) -> str:
        return f"vote on comparison {self.comparison_id}, turn {self.turn}"

    @property
    def verdict(self) -> str:
        """The vote as the compare page's button said it ("B is better", "Tie")."""
        return verdict(self.winner_column)


class SystemPromptPreset(models.Model):
    """A system prompt the team shares: anyone who chats can save one and apply any."""

    name = models.CharField(max_length=80, unique=True)
    text = models.TextField(max_length=20_000)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

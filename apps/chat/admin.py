from django.contrib import admin

from apps.audit.admin import ReadOnlyAdmin
from apps.chat.models import ArenaVote, Comparison, SystemPromptPreset


@admin.register(SystemPromptPreset)
class SystemPromptPresetAdmin(admin.ModelAdmin):
    """The team's shared system prompts (also saved and deleted from the Chat page)."""

    list_display = ["name", "created_by", "updated_at"]
    search_fields = ["name", "text"]
    readonly_fields = ["created_by", "created_at", "updated_at"]
    fields = ["name", "text", *readonly_fields]

    def save_model(self, request, obj, form, change):
        if not change and obj.created_by_id is None:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


@admin.register(Comparison)
class ComparisonAdmin(ReadOnlyAdmin):
    """Read-only: comparisons are made on the Chat page, one conversation per column."""

    list_display = ["__str__", "user", "created_at"]
    list_select_related = ["user"]
    search_fields = ["title", "user__username"]


@admin.register(ArenaVote)
class ArenaVoteAdmin(ReadOnlyAdmin):
    """Read-only: the team's votes, counted on the arena page."""

    list_display = ["comparison", "turn", "winner_column", "user", "prompt", "created_at"]
    list_select_related = ["comparison", "user"]
    list_filter = ["winner_column"]

from django.contrib import admin
from django.utils import timezone

from apps.api.models import ApiToken, Webhook, WebhookDelivery


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are made by their owners (profile page) or `manage.py apitoken`; an admin can
    see and revoke them here. The clear token exists nowhere."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "prefix"]
    fields = ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    list_display = ["url", "user", "events", "active", "created_at"]
    list_filter = ["active"]
    search_fields = ["url", "user__username"]
    fields = ["user", "url", "events", "active", "created_at"]  # never the secret
    readonly_fields = ["user", "url", "events", "created_at"]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["event", "webhook", "state", "attempts", "status_code", "created_at"]
    list_filter = ["state", "event"]
    readonly_fields = ["webhook", "event", "payload", "state", "attempts", "status_code", "error",
                       "created_at", "last_attempt_at"]  # fmt: skip

    def has_add_permission(self, request) -> bool:
        return False

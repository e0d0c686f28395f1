from django.contrib import admin

from apps.audit.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Read-only: an audit row is never added, changed or deleted by hand."""

    list_display = ("at", "actor_name", "source", "address", "action", "target")
    list_filter = ("source", "target_type", "action")
    search_fields = ("actor_name", "target", "message", "action")
    date_hierarchy = "at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

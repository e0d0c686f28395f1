from django.contrib import admin

from apps.audit.models import AuditEntry


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows a person may read in Django admin but never add, change or delete (the audit
    log here; the gateway's usage records)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Read-only: an audit row is never added, changed or deleted by hand."""

    list_display = ("at", "actor_name", "source", "address", "action", "target")
    list_filter = ("source", "target_type", "action")
    search_fields = ("actor_name", "target", "message", "action")
    date_hierarchy = "at"

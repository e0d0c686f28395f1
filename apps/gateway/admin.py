from django import forms
from django.contrib import admin

from apps.audit.admin import ReadOnlyAdmin
from apps.gateway.keys import key_revoke
from apps.gateway.models import (
    AllowedOrigin,
    GatewayKey,
    Limit,
    ModelAlias,
    OnDemand,
    UsageRecord,
)
from sparkdomain.flags import SERVED_NAME


class AliasForm(forms.ModelForm):
    class Meta:
        model = ModelAlias
        fields = ["name", "recipe"]

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not SERVED_NAME.match(name):
            raise forms.ValidationError("Letters, digits and . _ - : / only, up to 128.")
        return name


@admin.register(ModelAlias)
class ModelAliasAdmin(admin.ModelAdmin):
    form = AliasForm
    list_display = ["name", "recipe", "created_at"]
    search_fields = ["name", "recipe__name"]


@admin.register(AllowedOrigin)
class AllowedOriginAdmin(admin.ModelAdmin):
    """Web origins whose pages may call /v1 from a browser with a person's key (CORS)."""

    list_display = ["origin", "note", "created_at"]
    fields = ["origin", "note"]
    search_fields = ["origin", "note"]


@admin.register(OnDemand)
class OnDemandAdmin(admin.ModelAdmin):
    """The on-demand catalog: recipes a /v1 request loads when no run serves them, and
    stops again when idle (docs/gateway.md, "Models on demand")."""

    list_display = ["recipe", "priority", "idle_timeout_s", "exclusive_group",
                    "may_replace_manual", "max_replicas"]  # fmt: skip
    fields = ["recipe", "hosts", "priority", "idle_timeout_s", "exclusive_group",
              "may_replace_manual", "max_replicas", "replica_ttft_slo_s"]  # fmt: skip
    filter_horizontal = ["hosts"]
    autocomplete_fields = ["recipe"]


@admin.register(Limit)
class LimitAdmin(admin.ModelAdmin):
    list_display = ["__str__", "requests_per_minute", "concurrent_streams", "tokens_per_day"]
    fields = ["role", "user", "requests_per_minute", "concurrent_streams", "tokens_per_day"]
    raw_id_fields = ["user"]


@admin.register(GatewayKey)
class GatewayKeyAdmin(admin.ModelAdmin):
    """Keys are created by their owners (profile page); admins can see and revoke them."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    # Its own limits are set on the panel's Limits page (audited, bounded): shown here only.
    readonly_fields = ["user", "name", "prefix", "model_names", "expires_at",
                       "requests_per_minute", "concurrent_streams", "tokens_per_day",
                       "created_at", "last_used_at", "revoked_at"]  # fmt: skip
    fields = readonly_fields  # never the digest
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected keys (at once)")
    def revoke(self, request, queryset):
        for key in queryset:
            key_revoke(key=key)


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    """The record of who used what (and the /metrics counters) only grows."""

    list_display = ["at", "user", "model", "host", "prompt_tokens", "completion_tokens",
                    "status", "cancelled"]  # fmt: skip
    list_filter = ["source", "status", "cancelled"]
    date_hierarchy = "at"

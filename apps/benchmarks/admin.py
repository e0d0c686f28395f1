from django.contrib import admin

from apps.benchmarks.models import Job, Result, Suite


@admin.register(Suite)
class SuiteAdmin(admin.ModelAdmin):
    list_display = ["name", "is_default", "repetitions", "sweep_enabled", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "description", "is_default", "endpoint"]}),
        ("Single-stream scenarios", {
            "description": 'A list of {"name", "prompt_tokens", "output_tokens"}.',
            "fields": ["scenarios", "context_depths", "repetitions", "warmup_requests",
                       "warm_prefix", "shared_prefix_groups", "shared_prefix_tokens", "length_kind",
                       "length_spread"],
        }),
        ("Sweep", {"fields": ["sweep_enabled", "sweep_mode", "sweep_prompt_tokens",
                              "sweep_output_tokens", "sweep_levels", "sweep_rates",
                              "requests_per_level"]}),
        ("Request-rate sweep: arrivals", {"fields": ["arrival_kind", "burstiness",
                                                     "rate_max_concurrency", "ramp_up_s",
                                                     "arrival_seed"]}),
        ("SLO for goodput and the capacity answer", {"fields": ["slo_ttft_s", "slo_tpot_s"]}),
    ]  # fmt: skip


class ResultInline(admin.TabularInline):
    model = Result
    fields = ["kind", "scenario", "concurrency", "request_rate", "ok", "failed", "complete",
              "ttft_p50_s", "decode_tps_p50", "output_tps"]  # fmt: skip
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["pk", "recipe", "host", "state", "queued_by", "queued_at", "finished_at"]
    list_filter = ["state", "host"]
    readonly_fields = ["plan", "progress", "context", "summary", "run", "queued_at",
                       "started_at", "finished_at"]  # fmt: skip
    inlines = [ResultInline]

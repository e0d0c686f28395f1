from django.contrib import admin

from apps.recipes.forms import RecipeForm
from apps.recipes.models import HangPolicy, Recipe


class HangPolicyInline(admin.StackedInline):
    model = HangPolicy
    can_delete = True
    extra = 0
    max_num = 1
    verbose_name = "the guard: when a run hangs, its TTFT SLO"


@admin.register(Recipe)
class RecipeAdmin(admin.ModelAdmin):
    inlines = [HangPolicyInline]
    # The same form as the browser: the ≤ 0.90 rule and the flag allowlist apply here too.
    form = RecipeForm
    list_display = [
        "name",
        "model_id",
        "gpu_memory_utilization",
        "max_model_len",
        "max_num_seqs",
        "is_preset",
    ]
    list_filter = ["is_preset", "weight_format", "kv_cache_dtype"]
    search_fields = ["name", "model_id", "description"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["created_by", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": [
            "name", "slug", "description", "model_id", "revision", "served_model_name", "image",
            "is_preset"]}),
        ("vLLM flags", {"fields": [
            "gpu_memory_utilization", "max_model_len", "max_num_seqs", "kv_cache_dtype",
            "quantization", "enable_prefix_caching", "enforce_eager",
            "max_num_batched_tokens", "tensor_parallel_size", "pipeline_parallel_size",
            "reasoning_parser", "tool_call_parser", "extra_args", "env"]}),
        ("Architecture", {"fields": [
            "total_params_b", "active_params_b", "weight_format", "weight_gb", "num_layers",
            "attention_layers", "kv_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
            "sliding_window_layers", "sliding_window", "recurrent_state_mib",
            "checkpoint_kv_dtype", "max_position_embeddings"]}),
        ("History", {"fields": ["created_by", "created_at", "updated_at"]}),
    ]  # fmt: skip

    def save_model(self, request, obj, form, change):
        if not change and obj.created_by_id is None:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

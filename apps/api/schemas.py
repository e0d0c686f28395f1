"""What the API answers with (and so what the OpenAPI schema documents)."""

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

from ninja import Field, Schema
from pydantic import ConfigDict, StringConstraints

from apps.recipes.forms import number_bound
from apps.recipes.launch import default_argv


class Strict(Schema):
    """Input schemas refuse unknown keys (a typo must not be silently ignored) and
    infinite or NaN numbers; each number field says its bounds (`bounded`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def bounded(name: str, default=None, *, ge=0, **kwargs):
    """A recipe number field with the recipe form's upper bound in the schema: 1e308 or a
    19-digit integer is a 422 on its field before any form or planner sees it."""
    return Field(default, ge=ge, le=number_bound(name), **kwargs)


# Recipe and planner utilizations: the form says "at most 0.90" in the domain's words (so
# 0.95 gets the reason); the schema keeps the number a share (≤ 1) of few digits.
UTILIZATION = {"le": 1, "max_digits": 12}
ExtraArg = Annotated[str, StringConstraints(max_length=1_000)]


class MeOut(Schema):
    username: str
    role: str | None
    permissions: list[str]


# --- hosts --------------------------------------------------------------------------------
class MemoryOut(Schema):
    total_bytes: int | None
    available_bytes: int | None
    used_percent: float | None
    level: str | None = Field(None, description="ok / warn / act (from the host agent)")
    source: str = Field(description="agent (measured on the Spark), panel, or unknown")
    error: str | None = None
    stale: bool = Field(
        False, description="the host agent is silent: these are its last figures, not now"
    )
    as_of: datetime | None = Field(None, description="when a stale agent's figures were taken")
    age_s: int | None = Field(None, description="how old a stale agent's figures are, seconds")


class AgentOut(Schema):
    live: bool
    seen_at: datetime | None
    error: str


class RunRef(Schema):
    id: int
    state: str
    recipe: str


class HostOut(Schema):
    name: str
    description: str
    engine: str
    simulated: bool
    worker_online: bool
    last_heartbeat: datetime | None
    agent: AgentOut
    memory: MemoryOut
    active_run: RunRef | None  # the oldest of `active_runs`
    active_runs: list[RunRef]  # every run on the host, oldest first (co-location)
    max_runs: int  # models it may run side by side
    jobs_running: int
    jobs_queued: int
    retired_at: datetime | None = None  # an admin retired it: no new runs or jobs (409)
    url: str


# --- recipes ------------------------------------------------------------------------------
class ArchitectureFields(Strict):
    """The model's architecture, as the planner reads it (all optional: the planner says
    what it cannot compute without)."""

    total_params_b: float | None = bounded("total_params_b")
    active_params_b: float | None = bounded("active_params_b")
    weight_format: str | None = None
    weight_gb: float | None = bounded("weight_gb")
    num_layers: int | None = bounded("num_layers")
    attention_layers: int | None = bounded("attention_layers")
    kv_heads: int | None = bounded("kv_heads")
    head_dim: int | None = bounded("head_dim")
    kv_lora_rank: int | None = bounded("kv_lora_rank")
    qk_rope_head_dim: int | None = bounded("qk_rope_head_dim")
    sliding_window_layers: int | None = bounded("sliding_window_layers")
    sliding_window: int | None = bounded("sliding_window")
    recurrent_state_mib: float | None = bounded("recurrent_state_mib")
    checkpoint_kv_dtype: str | None = None


class RecipeFields(ArchitectureFields):
    """Every field of a recipe. On create, name, model_id and the three required flags must be
    given; on update, only what changes."""

    name: str | None = None
    slug: str | None = None
    description: str | None = None
    model_id: str | None = None
    revision: str | None = Field(None, description="Branch, tag or commit; blank: the default.")
    served_model_name: str | None = None
    image: str | None = None
    gpu_memory_utilization: Decimal | None = Field(
        None,
        **UTILIZATION,
        description="At most 0.90 on a Spark (the panel refuses more).",
    )
    max_model_len: int | None = bounded(
        "max_model_len", ge=-1,
        description="Blank: the model's own context; -1: auto (the longest that fits).",
    )  # fmt: skip
    max_num_seqs: int | None = bounded("max_num_seqs", description="Blank: vLLM's default.")
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    max_num_batched_tokens: int | None = bounded("max_num_batched_tokens")
    tensor_parallel_size: int | None = bounded("tensor_parallel_size")
    pipeline_parallel_size: int | None = bounded("pipeline_parallel_size")
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    extra_args: list[ExtraArg] | None = Field(
        None,
        max_length=100,
        description="Any other `vllm serve` option the recipe's vLLM accepts, e.g. "
        '["--load-format", "fastsafetensors"], except the denylist (docs/recipes.md): never '
        "the panel's own options, code or files from outside the image, mounts, devices or "
        "privileges.",
    )
    env: dict[str, str] | None = Field(
        None, max_length=64,
        description="Environment variables that only tune vLLM (docs/recipes.md).",
    )  # fmt: skip


class PlanSummary(Schema):
    verdict: str
    max_concurrency: int | None
    decode_ceiling_tps: float | None


class RecipeOut(Schema):
    slug: str
    name: str
    description: str
    model_id: str
    revision: str
    served_model_name: str
    image: str
    gpu_memory_utilization: float
    max_model_len: int | None
    max_num_seqs: int | None
    kv_cache_dtype: str
    quantization: str
    enable_prefix_caching: bool | None
    enforce_eager: bool
    max_num_batched_tokens: int | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    reasoning_parser: str
    tool_call_parser: str
    extra_args: list[str]
    env: dict
    mods: list
    folders: list = Field(
        description="container folders the recipe reads; a host needs a model folder at each path"
    )
    source: dict
    max_position_embeddings: int | None
    total_params_b: float | None
    active_params_b: float | None
    weight_format: str
    weight_gb: float | None
    num_layers: int | None
    attention_layers: int | None
    kv_heads: int | None
    head_dim: int | None
    kv_lora_rank: int | None
    qk_rope_head_dim: int | None
    sliding_window_layers: int | None
    sliding_window: int | None
    recurrent_state_mib: float | None
    checkpoint_kv_dtype: str
    is_preset: bool
    created_at: datetime
    updated_at: datetime
    plan: PlanSummary
    url: str
    argv: list[str] = Field(
        description="The exact `vllm serve` vector the panel runs for this recipe on its "
        "default host (the first host; the port is the first of its range)."
    )
    upgrade_notes: list[str]

    @staticmethod
    def resolve_argv(obj) -> list[str]:
        return default_argv(obj)

    @staticmethod
    def resolve_plan(obj) -> dict:
        plan = obj.plan()
        return {
            "verdict": plan.verdict.value,
            "max_concurrency": plan.max_concurrency,
            "decode_ceiling_tps": plan.decode_ceiling_tps,
        }

    @staticmethod
    def resolve_url(obj) -> str:
        return obj.get_absolute_url()


class YamlImportIn(Strict):
    yaml: str = Field(description="A SparkPanel export or a sparkrun recipe (≤ 1 MB).")
    replace: bool = Field(False, description="Overwrite recipes with the same slug.")


class YamlImportOut(Schema):
    created: list[str]
    updated: list[str]
    notes: list[str]


# --- runs ---------------------------------------------------------------------------------
class RunStartIn(Strict):
    recipe: str = Field(description="The recipe's slug.")
    host: str = Field(description="The host's name.")
    fit_confirmation: str = Field(
        "", max_length=200,
        description="Operators only: the recipe's name, typed, to start a recipe the planner "
        "says does not fit on the host (otherwise 422 does_not_fit). Recorded on the run.",
    )  # fmt: skip


class FailureOut(Schema):
    reason: str
    advice: str
    log: str


class _RecipeOnHost(Schema):
    """Resolvers runs and jobs share (each is one recipe on one host); the fields are
    declared by each schema, in its own order."""

    @staticmethod
    def resolve_active(obj) -> bool:
        return obj.is_active

    @staticmethod
    def resolve_recipe(obj) -> str:
        return obj.recipe.slug

    @staticmethod
    def resolve_host(obj) -> str:
        return obj.host.name

    @staticmethod
    def resolve_url(obj) -> str:
        return obj.get_absolute_url()


class RunOut(_RecipeOnHost):
    id: int
    state: str
    state_label: str
    active: bool
    step: str
    percent: float = Field(description="Progress of the current phase (pulling, loading), 0–100.")
    recipe: str
    host: str
    started_by: str | None
    image: str
    image_digest: str = Field(
        description="The registry's manifest digest of the image when the run started "
        "(a tag moves, a digest does not); blank on a process host or for a local image."
    )
    image_pinned: str = Field(description="repo@sha256:… — pulls exactly that image.")
    image_id: str = Field(description="The local image id on the host.")
    endpoint: str
    argv: list[str]
    created_at: datetime
    updated_at: datetime
    elapsed_s: float
    remaining_s: float | None
    cold_ttft_s: float | None
    warm_ttft_s: float | None
    failure: FailureOut | None
    restart_of: int | None
    fit_verdict: str = Field(
        description="The planner's verdict for the recipe on the host when the run was "
        "admitted: fits, tight, does not fit (only with an override) or unknown; blank for "
        "runs admitted before verdicts were recorded."
    )
    fit_override_by: str | None = Field(
        description="Who started it although the planner said it does not fit."
    )
    fit_override_at: datetime | None
    pinned: bool = Field(
        description="Pinned by an operator: benchmark jobs for other recipes do not replace "
        "it (POST /runs/{id}/pin, /unpin)."
    )
    pinned_by: str | None = Field(description="Who pinned it.")
    pinned_at: datetime | None
    stop_reason: str = Field(
        description='Why the panel stopped it for other work ("stopped to run benchmark job '
        '12"); blank otherwise.'
    )
    stopped_by: str | None = Field(
        description="Who asked it to stop (null: nobody yet, or the panel itself)."
    )
    stop_requested_at: datetime | None = Field(description="When a stop was asked.")
    weights: dict | None = Field(
        description="The model this run serves: repo, revision as asked, the commit it "
        "resolved to and served (--revision), total and downloaded bytes, files — or, "
        'with "by": "vllm", why vLLM read the weights itself.'
    )
    download: dict | None = Field(
        description="While downloading: total_bytes, done_bytes, rate_bps, eta_s, files "
        "(path, done, size, active), files_left, attempt and a note after a failed try."
    )
    url: str

    @staticmethod
    def resolve_weights(obj) -> dict | None:
        return obj.facts.get("weights")

    @staticmethod
    def resolve_download(obj) -> dict | None:
        return obj.facts.get("download") if obj.state == "downloading" else None

    @staticmethod
    def resolve_state_label(obj) -> str:
        return obj.get_state_display()

    @staticmethod
    def resolve_fit_override_by(obj) -> str | None:
        return obj.fit_override_by.get_username() if obj.fit_override_by else None

    @staticmethod
    def resolve_pinned_by(obj) -> str | None:
        return obj.pinned_by.get_username() if obj.pinned_by else None

    @staticmethod
    def resolve_stopped_by(obj) -> str | None:
        return obj.stopped_by.get_username() if obj.stopped_by else None

    @staticmethod
    def resolve_started_by(obj) -> str | None:
        return obj.started_by.get_username() if obj.started_by else None

    @staticmethod
    def resolve_elapsed_s(obj) -> float:
        return round(obj.elapsed_seconds(), 1)

    @staticmethod
    def resolve_remaining_s(obj) -> float | None:
        remaining = obj.remaining_seconds()
        return None if remaining is None else round(remaining, 1)

    @staticmethod
    def resolve_failure(obj) -> dict | None:
        if obj.state != "failed":
            return None
        return {"reason": obj.failure_reason, "advice": obj.failure_advice, "log": obj.failure_log}

    @staticmethod
    def resolve_restart_of(obj) -> int | None:
        return obj.restart_of_id


class PlanCheckOut(Schema):
    quantity: str = Field(
        description="kv_cache_gib, kv_cache_tokens, max_concurrency or model_memory_gib."
    )
    label: str
    predicted: float | None = Field(description="What the planner predicted on this host.")
    measured: float | None = Field(description="What vLLM reported at this start.")
    ratio: float | None = Field(description="measured ÷ predicted.")


class RunDetailOut(RunOut):
    log_tail: str
    plan_check: list[PlanCheckOut] = Field(
        description="Plan against measured: the planner's numbers beside vLLM's own."
    )

    @staticmethod
    def resolve_plan_check(obj) -> list[dict]:
        return [
            {"quantity": c.quantity, "label": c.label, "predicted": c.predicted,
             "measured": c.measured, "ratio": c.ratio}
            for c in obj.plan_vs_measured()
        ]  # fmt: skip


# --- benchmarks ---------------------------------------------------------------------------
class SuiteOut(Schema):
    id: int
    name: str
    description: str
    is_default: bool
    scenarios: list[Any]
    repetitions: int
    sweep_enabled: bool
    endpoint: str = Field(description="`chat` or `completions`: the endpoint its requests use.")
    sweep_mode: str = Field(description="`concurrency` (closed loop) or `rate` (open loop).")
    sweep_levels: list[int]
    sweep_rates: list[float] = Field(description="A rate sweep's requests per second.")
    arrival_kind: str = Field(description="`poisson`, `gamma` or `constant`.")
    burstiness: float
    sweep_dataset: str = Field(
        description="`synthetic` (the sweep's lengths) or `sharegpt` (ShareGPT conversations)."
    )
    session_turns: int = Field(description="1: lone requests; 2 or more: chat sessions.")
    think_time_s: float = Field(description="A session's pause between answer and question.")
    followup_tokens: int = Field(description="About how long a session's later questions are.")
    slo_ttft_s: float
    slo_tpot_s: float


class JobQueueIn(Strict):
    recipe: str = Field(description="The recipe's slug.")
    host: str = Field(description="The host's name.")
    suite: str | None = Field(
        None, description="The suite's name or id; omitted = the default suite."
    )
    note: str = Field("", max_length=200, description="Why, e.g. “nightly after image update”.")


class JobOut(_RecipeOnHost):
    id: int
    state: str
    active: bool
    suite: str
    suite_id: int | None = Field(description="None: imported results (see imported_from).")
    imported_from: str = Field(
        description="Imported results: the file's format and name (blank: measured here)."
    )
    recipe: str
    host: str
    run: int | None
    image_digest: str = Field(
        description="The manifest digest of the image the measured run had (blank: none)."
    )
    queued_by: str | None
    note: str
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None
    progress: dict[str, Any]
    summary: dict[str, Any]
    error: str
    url: str
    results_url: str
    csv_url: str

    @staticmethod
    def resolve_suite(obj) -> str:
        return obj.plan.get("name") or (obj.suite.name if obj.suite else "")

    @staticmethod
    def resolve_run(obj) -> int | None:
        return obj.run_id

    @staticmethod
    def resolve_queued_by(obj) -> str | None:
        return obj.queued_by.get_username() if obj.queued_by else None

    @staticmethod
    def resolve_duration_s(obj) -> float | None:
        duration = obj.duration_seconds()
        return None if duration is None else round(duration, 1)

    @staticmethod
    def resolve_results_url(obj) -> str:
        return f"/api/v1/jobs/{obj.pk}/results"

    @staticmethod
    def resolve_csv_url(obj) -> str:
        return f"/api/v1/jobs/{obj.pk}/results.csv"


class JobDetailOut(JobOut):
    position: int | None = Field(
        None, description="0 = running now, 1 = next, …; null once finished."
    )
    estimated_start: datetime | None = None
    estimate_s: float | None = Field(None, description="Median duration of similar jobs.")
    waiting: str = Field(
        "",
        description="While queued behind another recipe (the host's run of it, or jobs "
        'ahead for it): "waiting for spark-1 to be free: …"; the job swaps that run out at '
        "its turn. Blank otherwise.",
    )


class CompareOut(Schema):
    jobs: list[dict[str, Any]]


# --- planner ------------------------------------------------------------------------------
class PlanIn(ArchitectureFields):
    """The flags and architecture the planner reads; the same rules as the wizard."""

    gpu_memory_utilization: Decimal = Field(**UTILIZATION, description="At most 0.90.")
    max_model_len: int = bounded("max_model_len", ...)
    max_num_seqs: int = bounded("max_num_seqs", ...)
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    max_num_batched_tokens: int | None = bounded("max_num_batched_tokens")
    tensor_parallel_size: int | None = bounded("tensor_parallel_size", 1)
    weight_format: str = "bf16"
    host: str | None = Field(None, description="Plan for this host's memory (default: a Spark).")


class PlanWarningOut(Schema):
    code: str
    severity: str
    message: str


class BudgetOut(Schema):
    key: str
    label: str
    bytes: float


class PlanOut(Schema):
    verdict: str
    weights_bytes: float | None
    active_weight_bytes: float | None
    kv_bytes_per_token: float | None
    kv_bytes_per_sequence: float | None
    state_bytes_per_sequence: float
    pool_bytes: float
    headroom_bytes: float
    kv_available_bytes: float | None
    kv_needed_bytes: float | None
    kv_usage_ratio: float | None
    tokens_that_fit: int | None
    max_concurrency: int | None
    largest_safe_utilization: float
    min_utilization_to_fit: float | None
    recommended_utilization: float
    recommendation_reason: str
    decode_ceiling_tps: float | None
    decode_ceiling_full_context_tps: float | None
    decode_ceiling_batch_tps: float | None
    physical_bytes: float
    budget: list[BudgetOut]
    warnings: list[PlanWarningOut]
    unknowns: list[str]


# --- model weights ------------------------------------------------------------------------


class CachedRevisionOut(Schema):
    commit: str
    refs: list[str]
    size: int = Field(description="Bytes on disk (blobs shared with other revisions counted).")
    files: int
    last_modified: float = Field(description="Unix time.")


class CachedModelOut(Schema):
    repo: str
    size: int = Field(description="Bytes on disk, shared blobs once.")
    partial: int = Field(description="Bytes of unfinished downloads (resumed by the next).")
    last_accessed: float = Field(description="Unix time.")
    revisions: list[CachedRevisionOut]
    recipes: list[str] = Field(description="Slugs of the recipes serving this model.")
    in_use: str | None = Field(description="Why it cannot be deleted now, or null.")


class PrefetchOut(Schema):
    id: int
    host: str
    recipe: str
    repo: str
    revision: str
    commit: str
    state: str = Field(description="queued, downloading, done, failed or cancelled.")
    progress: dict
    error: str
    advice: str
    requested_by: str | None
    created_at: datetime
    finished_at: datetime | None


class HostCacheOut(Schema):
    host: str
    path: str = Field(description="The host's Hugging Face home (blank: none set).")
    free_bytes: int | None
    total_bytes: int | None
    scanned_at: datetime | None
    error: str
    models: list[CachedModelOut]
    downloads: list[PrefetchOut] = Field(description="The newest downloads (Download now).")


class DownloadIn(Strict):
    host: str = Field(description="The host's name.", max_length=63)


class StartupPlanIn(Schema):
    """`spark plan` over the API: the exact command and what vLLM's accounting needs."""

    command: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        ..., min_length=3, max_length=256,
        description='The `vllm serve` vector: ["vllm", "serve", MODEL, flags…].',
    )  # fmt: skip
    host: str | None = Field(
        None, description="The host's vLLM version and memory (default: the default host)."
    )
    vllm_version: str | None = Field(None, max_length=64)
    total_gib: float | None = Field(None, gt=0, le=4096)
    free_gib: float | None = Field(None, ge=0, le=4096)
    checkpoint_gib: float | None = Field(None, gt=0, le=4096)
    config: dict[str, Any] | None = Field(
        None, description="The model's config.json (default: the one the panel stored for it)."
    )
    env: dict[str, Annotated[str, StringConstraints(max_length=200)]] | None = Field(
        None, description="vLLM's environment variables that change its checks (VLLM_*)."
    )
    device: str = Field("cuda", pattern="^(cuda|cpu)$")


class StartupPlanOut(Schema):
    vllm_version: str
    model_loading_gib: float | None
    available_kv_cache_gib: float | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    starts: bool
    error: str | None
    max_model_len: int
    block_size: int
    breakdown: dict[str, Any]
    notes: list[str]
    panel_allows: bool
    panel_reason: str | None

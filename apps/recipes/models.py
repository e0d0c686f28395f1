from __future__ import annotations

import contextlib
import json
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils.text import slugify

from apps.hosts.models import Host
from sparkdomain import options, planner, spark
from sparkdomain.command import utilization_text
from sparkdomain.env_rules import env_problems
from sparkdomain.flags import (
    KV_CACHE_DTYPES,
    PARSER_NAME,
    FlagError,
    check_utilization,
    served_names,
    served_names_problem,
    validate_extra_args,
    validate_image,
    validate_model_id,
    validate_revision,
)
from sparkdomain.model_refs import recipe_folders_problem
from vllm_adapter import speculative
from vllm_adapter.startup import ModelConfigError
from vllm_adapter.startup.model import read_model


def validate_utilization(value) -> None:
    try:
        check_utilization(value)
    except FlagError as exc:
        raise ValidationError(str(exc), code="utilization") from None


def validate_revision_field(value: str) -> None:
    message = validate_revision(value)
    if message:
        raise ValidationError(message)


def validate_model_id_field(value: str) -> None:
    """A Hub id, or a path inside some host's model directory (its Hugging Face cache):
    before a host is chosen any host's will do; each start checks its own host's."""
    message = validate_model_id(value, Host.objects.model_dirs())
    if message:
        raise ValidationError(message)


def validate_image_field(value: str) -> None:
    message = validate_image(value)
    if message:
        raise ValidationError(message)


def validate_folders_field(value) -> None:
    problem = recipe_folders_problem(value)
    if problem:
        raise ValidationError(f"Folders: {problem}.")


def validate_extra_args_field(value) -> None:
    try:
        validate_extra_args(value, Host.objects.model_dirs())
    except FlagError as exc:
        raise ValidationError(str(exc).splitlines()) from None


def validate_max_model_len(value) -> None:
    if value is not None and value != -1 and not 1 <= value <= 10_000_000:
        raise ValidationError(
            "Give a length from 1 to 10,000,000 tokens, auto (-1: the longest that fits), "
            "or leave it blank (the model's own context)."
        )


def validate_env_field(value) -> None:
    problems = env_problems(value)
    if problems:
        raise ValidationError(problems)


def validate_parser(value: str) -> None:
    if value and not PARSER_NAME.match(value):
        raise ValidationError("Use the parser's name: lowercase letters, digits, '_', '.', '-'.")


def validate_served_name(value: str) -> None:
    problem = served_names_problem(value) if value else ""
    if problem:
        raise ValidationError(problem)


class WeightFormat(models.TextChoices):
    BF16 = "bf16", "BF16 (2 B/param)"
    FP16 = "fp16", "FP16 (2 B/param)"
    FP8 = "fp8", "FP8 (1 B/param)"
    INT8 = "int8", "INT8 (1 B/param)"
    NVFP4 = "nvfp4", "NVFP4 (4.5 bits/param)"
    MXFP4 = "mxfp4", "MXFP4 (4.25 bits/param)"
    INT4 = "int4", "INT4 AWQ/GPTQ (4.25 bits/param)"
    FP32 = "fp32", "FP32 (4 B/param)"


class RecipeQuerySet(models.QuerySet):
    def presets(self):
        return self.filter(is_preset=True)


def answering_to(name: str) -> Q:
    """The recipes that may answer to `name` (one of their served names, else their model
    id), as a filter; `recipes_answering_to` keeps the exact ones (SQLite's LIKE ignores
    case)."""
    return (
        Q(served_model_name=name)
        | Q(served_model_name__startswith=f"{name} ")
        | Q(served_model_name__endswith=f" {name}")
        | Q(served_model_name__contains=f" {name} ")
        | Q(served_model_name="", model_id=name)
    )


def recipes_answering_to(name: str, queryset=None) -> list[Recipe]:
    """The recipes clients reach by `name`: one of its served names, else its model id."""
    queryset = Recipe.objects.all() if queryset is None else queryset
    return [r for r in queryset.filter(answering_to(name))[:50] if name in r.served_names]


class Recipe(models.Model):
    """How to serve one model on a Spark: the model, the image, typed vLLM flags and the
    model's architecture (for the memory planner)."""

    KV_CACHE_DTYPE_CHOICES = [(v, v) for v in KV_CACHE_DTYPES]
    CHECKPOINT_KV_CHOICES = [
        ("", "model dtype"),
        ("bf16", "bf16"),
        ("fp16", "fp16"),
        ("fp8", "fp8"),
    ]

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True, blank=True)
    description = models.TextField(blank=True)
    model_id = models.CharField(
        "model",
        max_length=200,
        validators=[validate_model_id_field],
        help_text="Hugging Face id (organisation/model), or a path inside a host's Hugging Face "
        "cache (/root/.cache/huggingface/… in a container).",
    )
    revision = models.CharField(
        max_length=200, blank=True, validators=[validate_revision_field],
        help_text="A branch, tag or commit of the model's repository; blank = its default "
        "branch. Each run downloads and records the commit this resolves to, and serves that.",
    )  # fmt: skip
    served_model_name = models.CharField(
        max_length=512, blank=True, validators=[validate_served_name],
        help_text="Name clients use in requests; blank = the model id. Several names, "
        "separated by spaces, are all answered to; the first is the one the panel lists.",
    )  # fmt: skip
    image = models.CharField(
        "container image", max_length=255, default=spark.DEFAULT_IMAGE,
        validators=[validate_image_field],
    )  # fmt: skip

    # --- vLLM flags --------------------------------------------------------------------
    gpu_memory_utilization = models.DecimalField(
        max_digits=4,
        decimal_places=3,
        validators=[validate_utilization],
        help_text="Share of the memory CUDA sees that vLLM may take. At most 0.90 on a Spark.",
    )
    max_model_len = models.IntegerField(
        null=True, blank=True,
        validators=[
            MinValueValidator(-1), MaxValueValidator(10_000_000), validate_max_model_len
        ],
        help_text="Longest prompt + answer in tokens. Blank: the model's own context; "
        "auto (-1): the longest that fits in memory (vLLM decides at start).",
    )  # fmt: skip
    max_num_seqs = models.PositiveIntegerField(
        null=True, blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(1024)],
        help_text="Sequences served at once (the seeds recommend 4–10). Blank: vLLM's "
        f"default ({spark.VLLM_DEFAULT_MAX_NUM_SEQS} on a Spark).",
    )  # fmt: skip
    kv_cache_dtype = models.CharField(
        max_length=32, choices=KV_CACHE_DTYPE_CHOICES, default="auto",
        help_text="Every KV-cache dtype of the vLLM versions SparkPanel knows; the host's "
        "vLLM must have the one chosen (checked when saved and at each start).",
    )  # fmt: skip
    quantization = models.CharField(
        max_length=32, blank=True, validators=[validate_parser],
        help_text="Blank: detected from the checkpoint (NVFP4, FP8, AWQ… checkpoints say what "
        "they are). Otherwise a method name of the image's vLLM (e.g. modelopt_fp4).",
    )  # fmt: skip
    enable_prefix_caching = models.BooleanField(
        null=True, blank=True, default=None,
        help_text="Blank: vLLM's own choice (on for most models, off where the model cannot "
        "use it); on or off adds --enable-prefix-caching or --no-enable-prefix-caching.",
    )  # fmt: skip
    enforce_eager = models.BooleanField(
        default=False, help_text="No CUDA graphs: saves 3–5 GB, slower decode."
    )
    max_num_batched_tokens = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(1_048_576)]
    )
    tensor_parallel_size = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(8)]
    )
    pipeline_parallel_size = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(8)],
        help_text="Pipeline stages (vLLM's --pipeline-parallel-size). Tensor × pipeline "
        "parallel is the GPUs a run needs: 1 (one Spark) or 2 (a pair).",
    )  # fmt: skip
    reasoning_parser = models.CharField(max_length=64, blank=True, validators=[validate_parser])
    tool_call_parser = models.CharField(max_length=64, blank=True, validators=[validate_parser])
    extra_args = models.JSONField(
        default=list, blank=True, validators=[validate_extra_args_field],
        help_text="Any other option the recipe's vLLM accepts, except the denylist "
        "(docs/recipes.md: the panel's own options, code or files from outside the image, "
        "memory outside the utilization).",
    )  # fmt: skip
    mods = models.JSONField(
        default=list, blank=True, editable=False,
        help_text="Container mods and patches the recipe asks for (sparkrun `mods:`, "
        "`patches:`): code that would run in the container. Kept and shown; a start refuses "
        "them unless the host allows them (docs/recipes.md, Mods).",
    )  # fmt: skip
    env = models.JSONField(
        default=dict, blank=True, validators=[validate_env_field],
        help_text="Environment variables that only tune vLLM (docs/recipes.md lists which).",
    )  # fmt: skip
    folders = models.JSONField(
        default=list, blank=True, editable=False, validators=[validate_folders_field],
        help_text="Folders the recipe reads a model, draft or tokenizer from, as the container "
        'sees them, with where its source mounted them from ([{"path": "/drafter", "source": '
        '"~/models/x"}]). SparkPanel never mounts a recipe\'s folders: a host runs the recipe '
        "when an admin gave it a model folder at that path (Host model folders).",
    )  # fmt: skip
    source = models.JSONField(
        default=dict, blank=True, editable=False,
        help_text="Where the recipe came from: format, registry, path, commit, and the "
        "descriptive metadata it carried (author, dates, tags, links).",
    )  # fmt: skip

    # --- architecture (for the planner) ----------------------------------------------------
    total_params_b = models.FloatField(
        "total parameters (B)", null=True, blank=True, validators=[MinValueValidator(0.001)]
    )
    active_params_b = models.FloatField(
        "active parameters (B)", null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="MoE models only: parameters used per token.",
    )  # fmt: skip
    weight_format = models.CharField(max_length=8, choices=WeightFormat.choices, default="bf16")
    weight_gb = models.FloatField(
        "weight size (GB)", null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="The checkpoint's real size; better than parameters × bytes for "
        "mixed-precision builds.",
    )  # fmt: skip
    num_layers = models.PositiveIntegerField(null=True, blank=True)
    attention_layers = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Layers that keep a KV cache (hybrid Mamba/linear-attention models have "
        "fewer than their layer count). Blank = all layers.",
    )  # fmt: skip
    kv_heads = models.PositiveIntegerField("KV heads", null=True, blank=True)
    head_dim = models.PositiveIntegerField(null=True, blank=True)
    kv_lora_rank = models.PositiveIntegerField("MLA kv_lora_rank", null=True, blank=True)
    qk_rope_head_dim = models.PositiveIntegerField("MLA qk_rope_head_dim", null=True, blank=True)
    sliding_window_layers = models.PositiveIntegerField(null=True, blank=True)
    sliding_window = models.PositiveIntegerField("sliding window (tokens)", null=True, blank=True)
    recurrent_state_mib = models.FloatField(
        "recurrent state per sequence (MiB)", null=True, blank=True,
        validators=[MinValueValidator(0)],
    )  # fmt: skip
    checkpoint_kv_dtype = models.CharField(
        "KV dtype of 'auto'", max_length=8, choices=CHECKPOINT_KV_CHOICES, blank=True
    )
    max_position_embeddings = models.PositiveIntegerField(
        "model's context (tokens)", null=True, blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100_000_000)],
        help_text="The longest context the model supports (config.json); what vLLM uses "
        "when max model len is blank.",
    )  # fmt: skip

    upgrade_notes = models.JSONField(
        default=list, blank=True, editable=False,
        help_text="What upgrades of SparkPanel changed in this recipe, and why.",
    )  # fmt: skip

    is_preset = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="recipes",
    )  # fmt: skip
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RecipeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            # The last line in the database: no path, not even a raw UPDATE, stores more.
            models.CheckConstraint(
                condition=Q(gpu_memory_utilization__gt=0)
                & Q(gpu_memory_utilization__lte=spark.MAX_GPU_MEMORY_UTILIZATION),
                name="recipe_gpu_memory_utilization_at_most_0_90",
                violation_error_message=spark.UTILIZATION_RULE,
            ),
            models.CheckConstraint(
                condition=(
                    Q(max_model_len__isnull=True) | Q(max_model_len=-1) | Q(max_model_len__gte=1)
                )
                & (Q(max_num_seqs__isnull=True) | Q(max_num_seqs__gte=1)),
                name="recipe_lengths_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        self.__dict__.pop("_model_kind_cache", None)  # the model may have changed
        if not self.slug:
            self.slug = slugify(self.name)[:100] or "recipe"
        if self.gpu_memory_utilization is not None:
            # As the database keeps it (three places): 0.85 saved twice is no change.
            with contextlib.suppress(ArithmeticError, ValueError):
                self.gpu_memory_utilization = Decimal(str(self.gpu_memory_utilization)).quantize(
                    Decimal("0.001")
                )
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        return reverse("recipe-detail", args=[self.slug])

    @property
    def folder_dirs(self) -> list[str]:
        """The recipe's folders as model directories (each one a model itself too: the
        trailing '/', sparkdomain/model_refs.py)."""
        return [f["path"].rstrip("/") + "/" for f in self.folders or ()
                if isinstance(f, dict) and f.get("path")]  # fmt: skip

    def folder_hosts(self) -> list[tuple[dict, list[str]]]:
        """Each folder the recipe reads, with the hosts whose admin gave them a model
        folder there (where the recipe can start)."""
        hosts = list(Host.objects.exclude(model_folders=[]).only("name", "engine", "model_folders"))
        return [
            (f, [h.name for h in hosts if h.model_folder_at(f["path"]) is not None])
            for f in self.folders or ()
            if isinstance(f, dict) and f.get("path")
        ]

    def clean_fields(self, exclude=None) -> None:
        """As Django's, except that a path in the extra arguments may also lie in one of
        the recipe's own folders (which each start checks on its host)."""
        exclude = set(exclude or ())
        errors: dict = {}
        try:
            super().clean_fields(exclude=exclude | {"extra_args"})
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        if "extra_args" not in exclude:
            # Folders that failed their own check stand for no directory.
            own = () if "folders" in errors else self.folder_dirs
            dirs = (*Host.objects.model_dirs(), *own)
            try:
                validate_extra_args(self.extra_args, dirs)
            except FlagError as exc:
                errors.setdefault("extra_args", []).extend(str(exc).splitlines())
        if errors:
            raise ValidationError(errors)

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if (
            self.active_params_b is not None
            and self.total_params_b is not None
            and self.active_params_b > self.total_params_b
        ):
            errors["active_params_b"] = "Active parameters cannot exceed the total."
        layers = self.num_layers
        if (
            self.attention_layers is not None
            and layers is not None
            and self.attention_layers > layers
        ):
            errors["attention_layers"] = f"Cannot exceed the {layers} layers of the model."
        attn = self.attention_layers if self.attention_layers is not None else layers
        if self.sliding_window_layers and attn is not None and self.sliding_window_layers > attn:
            errors["sliding_window_layers"] = "Cannot exceed the number of attention layers."
        if self.sliding_window_layers and not self.sliding_window:
            errors["sliding_window"] = "Give the window size for the sliding-window layers."
        if bool(self.kv_lora_rank) != (
            self.qk_rope_head_dim is not None and self.kv_lora_rank is not None
        ):
            errors["qk_rope_head_dim"] = "MLA needs both kv_lora_rank and qk_rope_head_dim."
        clash = self.public_name_clash()
        if clash:
            errors["served_model_name" if self.served_model_name else "model_id"] = clash
        if errors:
            raise ValidationError(errors)

    @property
    def served_names(self) -> list[str]:
        """Every name the server answers to: its served names, else its model id."""
        return served_names(self.served_model_name) or [self.model_id]

    @property
    def public_name(self) -> str:
        """The name the panel lists (its first served name, else its model id)."""
        return self.served_names[0]

    def public_name_clash(self) -> str:
        """Why this recipe's public name would be wrong, or "": every ready run of a recipe
        with a public name is a replica of it (apps/gateway/routing.py), so two recipes that
        answer to one name must serve one model — a served name equal to another recipe's
        model id would merge two different models and answer with either."""
        if not self.model_id and not self.served_model_name:
            return ""
        others = Recipe.objects.exclude(pk=self.pk).exclude(model_id=self.model_id)
        for name in self.served_names:
            found = recipes_answering_to(name, others)
            if found:
                other = found[0]
                break
        else:
            return ""
        return (f"Clients already reach the recipe “{other.name}” ({other.model_id}) by the "
                f"name “{name}”; two different models cannot share one name (requests would "
                "go to either). Choose another served model name.")  # fmt: skip

    # --- planner adapters --------------------------------------------------------------
    def architecture(self) -> planner.Architecture:
        return planner.Architecture(
            total_params_b=self.total_params_b,
            active_params_b=self.active_params_b,
            weight_format=self.weight_format,
            weight_gb=self.weight_gb,
            num_layers=self.num_layers,
            attention_layers=self.attention_layers,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            sliding_window_layers=self.sliding_window_layers,
            sliding_window=self.sliding_window,
            recurrent_state_mib=self.recurrent_state_mib,
            checkpoint_kv_dtype=self.checkpoint_kv_dtype,
        )

    @property
    def speculative_config(self) -> dict | None:
        """The speculative decoding the recipe asks vLLM for (`--speculative-config`, its JSON
        and its `--speculative-config.<key>` forms, as vLLM merges them), or None."""
        config: dict | None = None
        for head, value in options.given(list(self.extra_args or [])):
            if head == "--speculative-config":
                with contextlib.suppress(ValueError):
                    loaded = json.loads(value)
                    if isinstance(loaded, dict):
                        config = {**(config or {}), **loaded}
            elif head.startswith("--speculative-config."):
                parsed: object = value
                with contextlib.suppress(ValueError):
                    parsed = json.loads(value)
                config = {**(config or {}), head.partition(".")[2]: parsed}
        return config

    @property
    def speculation(self) -> speculative.Speculation | None:
        """The recipe's speculative decoding with its expected acceptance (stated with vLLM's
        synthetic rejection sampling, else the default of the drafter — of the model's own
        MTP head where public measurements exist, when the panel has read the model's
        config.json); None without, or for a config vLLM would refuse (the recipe's checks
        say why)."""
        config = self.speculative_config
        if not config:
            return None
        model_type, mtp_layers = self._model_kind()
        try:
            return speculative.from_config(config, mtp_layers=mtp_layers, model_type=model_type)
        except speculative.SpeculationError:
            return None

    def _model_kind(self) -> tuple[str, int]:
        """The model's config.json `model_type` and MTP layers, from the facts the panel
        read of it (ModelFacts: the downloads, `spark plan`, the wizard); ("", 1) unknown.
        Read once per instance."""
        cached = self.__dict__.get("_model_kind_cache")
        if cached is not None:
            return cached
        kind: tuple[str, int] = ("", 1)
        facts = ModelFacts.for_recipe(self) if self.model_id else None
        if facts is not None and isinstance(facts.config, dict):
            try:
                text = read_model(facts.config)
                kind = (text.model_type, max(int(text.mtp_layers or 1), 1))
            except (ModelConfigError, ValueError, TypeError):
                pass
        self.__dict__["_model_kind_cache"] = kind
        return kind

    @property
    def speculation_text(self) -> str:
        spec = self.speculation
        return spec.describe() if spec else ""

    @property
    def utilization_text(self) -> str:
        """The utilization as the command spells it: 0.85, or 0.825 (never 0.850)."""
        return utilization_text(self.gpu_memory_utilization)

    @property
    def context_tokens(self) -> int | None:
        """The longest context a run of this recipe serves, as vLLM decides it: the max model
        len given, else (blank, or auto) the model's own context when known."""
        if self.max_model_len and self.max_model_len > 0:
            return self.max_model_len
        return self.max_position_embeddings

    @property
    def sequences(self) -> int:
        """Sequences served at once: the field, else vLLM's default on a Spark."""
        return self.max_num_seqs or spark.VLLM_DEFAULT_MAX_NUM_SEQS

    @property
    def world_size(self) -> int:
        """GPUs a run needs: tensor × pipeline parallel (one per Spark)."""
        return (self.tensor_parallel_size or 1) * (self.pipeline_parallel_size or 1)

    def flags(self) -> planner.Flags:
        return planner.Flags(
            gpu_memory_utilization=float(self.gpu_memory_utilization),
            max_model_len=self.context_tokens,
            max_num_seqs=self.sequences,
            kv_cache_dtype=self.kv_cache_dtype,
            enforce_eager=self.enforce_eager,
            max_num_batched_tokens=self.max_num_batched_tokens,
            # The planner splits a model over a pair by its world size (a pipeline halves
            # the weights and the KV per Spark as tensor parallelism does).
            tensor_parallel_size=self.world_size,
        )

    def plan(self, host: planner.HostSpec | None = None) -> planner.Plan:
        return planner.plan(self.architecture(), self.flags(), host)


class HangPolicy(models.Model):
    """What the host agent does when a run of this recipe hangs (apps/guard/hang.py,
    docs/guard.md): alert only, or restart it — once, or with a doubling delay up to
    `max_restarts` times in a row. A recipe without one: alert only, 120 s stall."""

    class Action(models.TextChoices):
        ALERT = "alert", "Alert only"
        RESTART = "restart", "Restart (up to the limit, with backoff)"

    recipe = models.OneToOneField(Recipe, on_delete=models.CASCADE, related_name="hang_policy")
    action = models.CharField(max_length=10, choices=Action.choices, default=Action.ALERT)
    stall_s = models.PositiveIntegerField(
        "stalled after (s)", default=120,
        validators=[MinValueValidator(10), MaxValueValidator(3600)],
        help_text="Requests running and no token generated for this long is a hang.",
    )  # fmt: skip
    max_restarts = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(10)],
        help_text="Restarts in a row for hangs before the agent only alerts (1: restart once).",
    )  # fmt: skip
    backoff_s = models.PositiveIntegerField(
        "first restart after (s)", default=0,
        validators=[MinValueValidator(0), MaxValueValidator(3600)],
        help_text="Delay before the first restart; each further one waits twice as long.",
    )  # fmt: skip

    ttft_slo_s = models.FloatField(
        "TTFT p95 SLO (s)", null=True, blank=True,
        validators=[MinValueValidator(0.01), MaxValueValidator(3600)],
        help_text="A TTFT p95 above this for 5 minutes is an alert (empty: none).",
    )  # fmt: skip

    def __str__(self) -> str:
        return f"{self.recipe}: {self.get_action_display()}"

    def restart_delay_s(self, restarts_so_far: int) -> float | None:
        """Seconds to wait before the next restart, or None: alert only, or the limit met."""
        if self.action != self.Action.RESTART or restarts_so_far >= self.max_restarts:
            return None
        return float(self.backoff_s * 2**restarts_so_far)


class RecipeRegistry(models.Model):
    """A sparkrun recipe registry an admin added (docs/recipes.md, Registries): a git URL or
    a local checkout, mirrored bare under the var directory (git_adapter) and read at the
    commit its default branch was at when last fetched."""

    name = models.SlugField(max_length=60, unique=True)
    url = models.CharField(
        "git URL or local path", max_length=500,
        help_text="https://…, ssh://…, git@host:path, file://… or an absolute path to a "
        "checkout on the panel's machine.",
    )  # fmt: skip
    commit = models.CharField(max_length=64, blank=True, editable=False)
    fetched_at = models.DateTimeField(null=True, blank=True, editable=False)
    error = models.TextField(blank=True, editable=False)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )  # fmt: skip
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("registry-detail", args=[self.name])


class ModelFacts(models.Model):
    """What the start-up prediction (vllm_adapter/startup) needs of a model at a commit: its
    config.json and the size of the weight files vLLM loads. Filled by the downloads before
    a start and by `spark plan` (hf_adapter/facts.py); read by the recipe page."""

    repo_id = models.CharField(max_length=200)
    commit = models.CharField(max_length=64)
    config = models.JSONField()
    checkpoint_bytes = models.BigIntegerField(null=True, blank=True)
    source = models.CharField(max_length=32)
    fetched_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["repo_id", "commit"], name="one_facts_per_commit")
        ]
        ordering = ["-fetched_at"]
        verbose_name_plural = "model facts"

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.commit[:12]}"

    @classmethod
    def record(cls, facts) -> ModelFacts:
        """Store an hf_adapter ModelFacts (the latest reading wins)."""
        row, _ = cls.objects.update_or_create(
            repo_id=facts.repo_id, commit=facts.commit,
            defaults={"config": facts.config, "checkpoint_bytes": facts.checkpoint_bytes,
                      "source": facts.source},
        )  # fmt: skip
        return row

    @classmethod
    def for_drafter(cls, recipe: Recipe) -> ModelFacts | None:
        """The facts of the recipe's speculative drafter when it has a checkpoint of its own
        (an EAGLE head, a DFlash drafter, a draft model) and the panel has read it."""
        spec = recipe.speculation
        if spec is None or not spec.draft_model or spec.family in ("mtp", "lookup"):
            return None
        return cls.objects.filter(repo_id=spec.draft_model).first()

    @classmethod
    def for_recipe(cls, recipe: Recipe) -> ModelFacts | None:
        """The facts of the recipe's model: at its pinned commit, else the newest known."""
        rows = cls.objects.filter(repo_id=recipe.model_id)
        if recipe.revision:
            exact = rows.filter(commit=recipe.revision).first()
            if exact is not None:
                return exact
        return rows.first()

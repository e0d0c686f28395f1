from __future__ import annotations

from decimal import Decimal

from django import forms

from apps.core.forms import BoundedFloatField, BoundedIntegerField, bounded_formfields, model_max
from apps.hosts.models import Host
from apps.recipes.models import Recipe, WeightFormat, validate_utilization
from sparkdomain import planner, spark
from sparkdomain.command import contract_problems
from sparkdomain.env_rules import env_problems
from sparkdomain.flags import FlagError, format_extra_args, parse_extra_args
from vllm_adapter import contract as vllm_contract

ARCH_FIELDS = [
    "total_params_b", "active_params_b", "weight_format", "weight_gb", "num_layers",
    "attention_layers", "kv_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
    "sliding_window_layers", "sliding_window", "recurrent_state_mib", "checkpoint_kv_dtype",
    "max_position_embeddings",
]  # fmt: skip
FLAG_FIELDS = [
    "gpu_memory_utilization", "max_model_len", "max_num_seqs", "kv_cache_dtype", "quantization",
    "enable_prefix_caching", "enforce_eager", "max_num_batched_tokens",
    "tensor_parallel_size", "pipeline_parallel_size", "reasoning_parser", "tool_call_parser",
]  # fmt: skip
IDENTITY_FIELDS = [
    "name", "slug", "description", "model_id", "revision", "served_model_name", "image",
]  # fmt: skip

# Upper bounds of the architecture numbers (the flags' are the model's own validators):
# generous for any real checkpoint (DeepSeek-V3: 671 B, 61 layers, kv_lora_rank 512), small
# enough that the planner's products (layers × heads × head_dim × context × sequences) stay
# finite floats. The forms, the API schema and the YAML import all use these.
ARCH_BOUNDS = {
    "total_params_b": 10_000, "active_params_b": 10_000, "weight_gb": 10_000,
    "num_layers": 10_000, "attention_layers": 10_000, "sliding_window_layers": 10_000,
    "kv_heads": 1_024, "head_dim": 16_384, "kv_lora_rank": 65_536, "qk_rope_head_dim": 16_384,
    "sliding_window": 10_000_000, "recurrent_state_mib": 1_048_576,
    "max_position_embeddings": 100_000_000,
}  # fmt: skip


def number_bound(name: str):
    """The upper bound of a recipe's number field `name`."""
    if name in ARCH_BOUNDS:
        return ARCH_BOUNDS[name]
    return model_max(Recipe._meta.get_field(name))


UTILIZATION_WIDGET = forms.NumberInput(
    attrs={"step": "0.001", "min": "0.001", "max": str(spark.MAX_GPU_MEMORY_UTILIZATION)}
)


def utilization_field(**kwargs) -> forms.DecimalField:
    # The browser stops at 0.90; the validator stops a crafted POST with the same words.
    return forms.DecimalField(
        label="GPU memory utilization",
        max_digits=4,
        decimal_places=3,
        validators=[validate_utilization],
        widget=UTILIZATION_WIDGET,
        help_text="At most 0.90 on a Spark: above it the whole machine can freeze.",
        **kwargs,
    )


class DefaultOnOffSelect(forms.NullBooleanSelect):
    """A switch vLLM decides unless the recipe says: vLLM's default, on, off."""

    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.choices = [("unknown", "vLLM's default"), ("true", "On"), ("false", "Off")]


class ExtraArgsField(forms.CharField):
    widget = forms.Textarea(attrs={"rows": 3, "placeholder": "--load-format fastsafetensors"})

    def prepare_value(self, value):
        if isinstance(value, list):
            return format_extra_args(value)
        return value

    # The recipe's own folders (Recipe.folders): a path may lie there too; each start checks
    # that its host has them.
    extra_dirs: tuple[str, ...] = ()

    def to_python(self, value):
        text = super().to_python(value) or ""
        try:  # a --tokenizer path: inside some host's model directory (apps/recipes/models.py)
            return parse_extra_args(text, (*Host.objects.model_dirs(), *self.extra_dirs))
        except FlagError as exc:
            raise forms.ValidationError(str(exc).splitlines()) from None


class MaxModelLenField(BoundedIntegerField):
    """A length in tokens, `auto` (-1: the longest that fits, vLLM decides), or blank (the
    model's own context)."""

    widget = forms.TextInput(attrs={"inputmode": "numeric", "placeholder": "model's own"})

    def to_python(self, value):
        if isinstance(value, str) and value.strip().lower() == "auto":
            return -1
        return super().to_python(value)

    def prepare_value(self, value):
        return "auto" if value == -1 else value


class EnvField(forms.CharField):
    """NAME=value, one per line (sparkdomain/env_rules.py judges each)."""

    widget = forms.Textarea(attrs={"rows": 2, "placeholder": "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"})

    def prepare_value(self, value):
        if isinstance(value, dict):
            return "\n".join(f"{k}={v}" for k, v in value.items())
        return value

    def to_python(self, value):
        if isinstance(value, dict):
            return value
        text = super().to_python(value) or ""
        env: dict[str, str] = {}
        problems = []
        for line in text.splitlines()[:1000]:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, eq, item = line.partition("=")
            if not eq:
                problems.append(f"{line[:60]!r}: write NAME=value")
                continue
            env[name.strip()] = item.strip()
        problems += env_problems(env)
        if problems:
            raise forms.ValidationError(problems[:10])
        return env


class RecipeForm(forms.ModelForm):
    gpu_memory_utilization = utilization_field()
    max_model_len = MaxModelLenField(
        required=False, min_value=-1, max_value=10_000_000,
        label="Max model len (context per user, tokens)",
        help_text="Longest prompt + answer in tokens; blank: the model's own context; auto: "
        "the longest that fits in memory (vLLM decides at start).",
    )  # fmt: skip
    extra_args = ExtraArgsField(
        required=False,
        help_text="Any other vLLM option, one per line, that the host's vLLM accepts — except "
        "the panel's own, code or files from outside the image, and memory outside the "
        "utilization (docs/recipes.md lists them; each refusal says why). Never mounts, "
        "devices or privileges.",
    )
    pipeline_parallel_size = BoundedIntegerField(
        required=False, min_value=1, max_value=8, initial=1, label="Pipeline parallel size",
        help_text="Pipeline stages; tensor × pipeline parallel is the GPUs a run needs: 1 "
        "(one Spark) or 2 (a pair). Blank: 1.",
    )  # fmt: skip
    env = EnvField(
        required=False,
        help_text="Environment variables that only tune vLLM, NAME=value per line "
        "(docs/recipes.md, Environment).",
    )

    class Meta:
        model = Recipe
        fields = [*IDENTITY_FIELDS, *FLAG_FIELDS, "extra_args", "env", *ARCH_FIELDS]
        formfield_callback = bounded_formfields(ARCH_BOUNDS)
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "enable_prefix_caching": DefaultOnOffSelect(),
        }
        labels = {
            "max_model_len": "Max model len (context per user, tokens)",
            "max_num_seqs": "Max num seqs (users served at once)",
            "kv_cache_dtype": "KV cache dtype",
            "num_layers": "Layers",
            "max_num_batched_tokens": "Max batched tokens",
            "tensor_parallel_size": "Tensor parallel size",
            "enable_prefix_caching": "Prefix caching",
        }

    def __init__(self, *args, vllm_version: str | None = None, kept: dict | None = None,
                 **kwargs):  # fmt: skip
        super().__init__(*args, **kwargs)
        # What a recipe keeps but the form does not edit (yaml_io.KEPT: mods, folders,
        # source), as an import brings it: judged with the rest (a path in the extra
        # arguments may lie in the recipe's own folders).
        for name, value in (kept or {}).items():
            setattr(self.instance, name, value)
        self.fields["slug"].required = False
        self.fields["extra_args"].extra_dirs = tuple(self.instance.folder_dirs)
        self.fields["slug"].help_text = "Blank: made from the name."
        self.vllm_version = vllm_version
        # Suggestions from the checked vLLM's own registries; any value is still checked.
        for name, listed in (
            ("quantization", "vllm-quantization"),
            ("reasoning_parser", "vllm-reasoning-parsers"),
            ("tool_call_parser", "vllm-tool-parsers"),
        ):
            if name in self.fields:
                self.fields[name].widget.attrs["list"] = listed

    def clean_pipeline_parallel_size(self):
        return self.cleaned_data.get("pipeline_parallel_size") or 1

    def vllm_registries(self) -> dict:
        """The datalists the form's text fields suggest from (templates: datalists.html)."""
        c = vllm_contract.load(self.checked_version())
        return {
            "version": c.version,
            "lists": {
                "vllm-quantization": c.quantization_methods,
                "vllm-reasoning-parsers": c.reasoning_parsers,
                "vllm-tool-parsers": c.tool_parsers,
            },
        }

    def checked_version(self) -> str:
        """The vLLM whose parser and registries judge this recipe: the default host's (each
        start checks again against its own host's)."""
        if self.vllm_version:
            return self.vllm_version

        host = Host.objects.default()
        return host.contract_version if host is not None else vllm_contract.latest_version()

    def _post_clean(self):
        super()._post_clean()
        if self.errors:
            return  # the typed checks first: the vector is only built from valid fields
        version = self.checked_version()
        for field, message in contract_problems(self.instance, version):
            self.add_error(None if field not in self.fields else field, message)


class PlanInputForm(forms.Form):
    """Everything the planner reads, leniently: the live preview must work on a half-filled
    form, so only the three flags the planner cannot do without are required."""

    gpu_memory_utilization = utilization_field(initial=Decimal("0.85"))
    max_model_len = BoundedIntegerField(
        min_value=1, max_value=number_bound("max_model_len"), initial=8192
    )
    max_num_seqs = BoundedIntegerField(
        min_value=1, max_value=number_bound("max_num_seqs"), initial=4
    )
    kv_cache_dtype = forms.ChoiceField(choices=Recipe.KV_CACHE_DTYPE_CHOICES, initial="auto")
    enforce_eager = forms.BooleanField(required=False)
    max_num_batched_tokens = BoundedIntegerField(
        min_value=1, max_value=number_bound("max_num_batched_tokens"), required=False
    )
    tensor_parallel_size = BoundedIntegerField(
        min_value=1, max_value=number_bound("tensor_parallel_size"), required=False, initial=1
    )
    total_params_b = BoundedFloatField(
        min_value=0.001, max_value=ARCH_BOUNDS["total_params_b"], required=False
    )
    active_params_b = BoundedFloatField(
        min_value=0.001, max_value=ARCH_BOUNDS["active_params_b"], required=False
    )
    weight_format = forms.ChoiceField(choices=WeightFormat.choices, initial="bf16")
    weight_gb = BoundedFloatField(
        min_value=0.001, max_value=ARCH_BOUNDS["weight_gb"], required=False
    )
    num_layers = BoundedIntegerField(
        min_value=1, max_value=ARCH_BOUNDS["num_layers"], required=False
    )
    attention_layers = BoundedIntegerField(
        min_value=0, max_value=ARCH_BOUNDS["attention_layers"], required=False
    )
    kv_heads = BoundedIntegerField(min_value=1, max_value=ARCH_BOUNDS["kv_heads"], required=False)
    head_dim = BoundedIntegerField(min_value=1, max_value=ARCH_BOUNDS["head_dim"], required=False)
    kv_lora_rank = BoundedIntegerField(
        min_value=1, max_value=ARCH_BOUNDS["kv_lora_rank"], required=False
    )
    qk_rope_head_dim = BoundedIntegerField(
        min_value=0, max_value=ARCH_BOUNDS["qk_rope_head_dim"], required=False
    )
    sliding_window_layers = BoundedIntegerField(
        min_value=0, max_value=ARCH_BOUNDS["sliding_window_layers"], required=False
    )
    sliding_window = BoundedIntegerField(
        min_value=1, max_value=ARCH_BOUNDS["sliding_window"], required=False
    )
    recurrent_state_mib = BoundedFloatField(
        min_value=0, max_value=ARCH_BOUNDS["recurrent_state_mib"], required=False
    )
    checkpoint_kv_dtype = forms.ChoiceField(choices=Recipe.CHECKPOINT_KV_CHOICES, required=False)

    def to_planner(self) -> tuple[planner.Architecture, planner.Flags]:
        d = self.cleaned_data
        arch = planner.Architecture(
            total_params_b=d.get("total_params_b"),
            active_params_b=d.get("active_params_b"),
            weight_format=d.get("weight_format") or "bf16",
            weight_gb=d.get("weight_gb"),
            num_layers=d.get("num_layers"),
            attention_layers=d.get("attention_layers"),
            kv_heads=d.get("kv_heads"),
            head_dim=d.get("head_dim"),
            kv_lora_rank=d.get("kv_lora_rank"),
            qk_rope_head_dim=d.get("qk_rope_head_dim"),
            sliding_window_layers=d.get("sliding_window_layers"),
            sliding_window=d.get("sliding_window"),
            recurrent_state_mib=d.get("recurrent_state_mib"),
            checkpoint_kv_dtype=d.get("checkpoint_kv_dtype") or "",
        )
        flags = planner.Flags(
            gpu_memory_utilization=float(d["gpu_memory_utilization"]),
            max_model_len=d["max_model_len"],
            max_num_seqs=d["max_num_seqs"],
            kv_cache_dtype=d.get("kv_cache_dtype") or "auto",
            enforce_eager=bool(d.get("enforce_eager")),
            max_num_batched_tokens=d.get("max_num_batched_tokens"),
            tensor_parallel_size=d.get("tensor_parallel_size") or 1,
        )
        return arch, flags


class YamlImportForm(forms.Form):
    file = forms.FileField(
        required=False, help_text="A .yaml file exported by SparkPanel, or a sparkrun recipe."
    )
    text = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
        label="…or paste YAML",
    )  # fmt: skip
    replace = forms.BooleanField(
        required=False, label="Replace recipes with the same slug",
        help_text="Otherwise an existing slug is an error and nothing is imported.",
    )  # fmt: skip

    MAX_BYTES = 1_000_000

    def clean(self):
        data = super().clean()
        upload = data.get("file")
        if upload is not None:
            if upload.size > self.MAX_BYTES:
                raise forms.ValidationError(
                    "The file is larger than 1 MB; that is not a recipe file."
                )
            try:
                data["yaml_text"] = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("The file is not UTF-8 text.") from None
        else:
            data["yaml_text"] = data.get("text") or ""
        if not data["yaml_text"].strip():
            raise forms.ValidationError("Choose a file or paste YAML to import.")
        return data


class ConfigJsonForm(forms.Form):
    config_file = forms.FileField(required=False, label="config.json")
    config_text = forms.CharField(
        required=False, label="…or paste config.json",
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
    )  # fmt: skip
    quant_file = forms.FileField(required=False, label="hf_quant_config.json (optional)")
    quant_text = forms.CharField(
        required=False, label="…or paste hf_quant_config.json",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )  # fmt: skip

    MAX_BYTES = 2_000_000

    def _read(self, upload, text: str, label: str) -> str:
        if upload is not None:
            if upload.size > self.MAX_BYTES:
                raise forms.ValidationError(f"{label} is larger than 2 MB.")
            try:
                return upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError(f"{label} is not UTF-8 text.") from None
        return text or ""

    def clean(self):
        data = super().clean()
        data["config"] = self._read(data.get("config_file"), data.get("config_text"), "config.json")
        data["quant"] = self._read(
            data.get("quant_file"), data.get("quant_text"), "hf_quant_config.json"
        )
        if not data["config"].strip():
            raise forms.ValidationError("Upload or paste a config.json.")
        return data

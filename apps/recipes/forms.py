from __future__ import annotations

from decimal import Decimal

from django import forms

from apps.recipes import planner, spark
from apps.recipes.command import contract_problems
from apps.recipes.flags import FlagError, format_extra_args, parse_extra_args
from apps.recipes.models import Recipe, WeightFormat, validate_utilization
from vllm_adapter import contract as vllm_contract

ARCH_FIELDS = [
    "total_params_b", "active_params_b", "weight_format", "weight_gb", "num_layers",
    "attention_layers", "kv_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
    "sliding_window_layers", "sliding_window", "recurrent_state_mib", "checkpoint_kv_dtype",
]  # fmt: skip
FLAG_FIELDS = [
    "gpu_memory_utilization", "max_model_len", "max_num_seqs", "kv_cache_dtype", "quantization",
    "enable_prefix_caching", "enforce_eager", "max_num_batched_tokens",
    "tensor_parallel_size", "reasoning_parser", "tool_call_parser",
]  # fmt: skip
IDENTITY_FIELDS = ["name", "slug", "description", "model_id", "served_model_name", "image"]

UTILIZATION_WIDGET = forms.NumberInput(
    attrs={"step": "0.01", "min": "0.01", "max": str(spark.MAX_GPU_MEMORY_UTILIZATION)}
)


def utilization_field(**kwargs) -> forms.DecimalField:
    # The browser stops at 0.90; the validator stops a crafted POST with the same words.
    return forms.DecimalField(
        label="GPU memory utilization",
        max_digits=3,
        decimal_places=2,
        validators=[validate_utilization],
        widget=UTILIZATION_WIDGET,
        help_text="At most 0.90 on a Spark: above it the whole machine can freeze.",
        **kwargs,
    )


class ExtraArgsField(forms.CharField):
    widget = forms.Textarea(attrs={"rows": 3, "placeholder": "--load-format fastsafetensors"})

    def prepare_value(self, value):
        if isinstance(value, list):
            return format_extra_args(value)
        return value

    def to_python(self, value):
        text = super().to_python(value) or ""
        try:
            return parse_extra_args(text)
        except FlagError as exc:
            raise forms.ValidationError(str(exc).splitlines()) from None


class RecipeForm(forms.ModelForm):
    gpu_memory_utilization = utilization_field()
    extra_args = ExtraArgsField(
        required=False,
        help_text="Further vLLM flags, one per line, from the allowed list (no mounts, devices "
        "or privileges: those never come from a recipe).",
    )

    class Meta:
        model = Recipe
        fields = [*IDENTITY_FIELDS, *FLAG_FIELDS, "extra_args", *ARCH_FIELDS]
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
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

    def __init__(self, *args, vllm_version: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["slug"].required = False
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
        from apps.hosts.models import Host

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
    max_model_len = forms.IntegerField(min_value=1, max_value=10_000_000, initial=8192)
    max_num_seqs = forms.IntegerField(min_value=1, max_value=1024, initial=4)
    kv_cache_dtype = forms.ChoiceField(choices=Recipe.KV_CACHE_DTYPE_CHOICES, initial="auto")
    enforce_eager = forms.BooleanField(required=False)
    max_num_batched_tokens = forms.IntegerField(min_value=1, max_value=1_048_576, required=False)
    tensor_parallel_size = forms.IntegerField(min_value=1, max_value=8, required=False, initial=1)
    total_params_b = forms.FloatField(min_value=0.001, required=False)
    active_params_b = forms.FloatField(min_value=0.001, required=False)
    weight_format = forms.ChoiceField(choices=WeightFormat.choices, initial="bf16")
    weight_gb = forms.FloatField(min_value=0.001, required=False)
    num_layers = forms.IntegerField(min_value=1, required=False)
    attention_layers = forms.IntegerField(min_value=0, required=False)
    kv_heads = forms.IntegerField(min_value=1, required=False)
    head_dim = forms.IntegerField(min_value=1, required=False)
    kv_lora_rank = forms.IntegerField(min_value=1, required=False)
    qk_rope_head_dim = forms.IntegerField(min_value=0, required=False)
    sliding_window_layers = forms.IntegerField(min_value=0, required=False)
    sliding_window = forms.IntegerField(min_value=1, required=False)
    recurrent_state_mib = forms.FloatField(min_value=0, required=False)
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

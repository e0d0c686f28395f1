import re

from django import forms

from apps.benchmarks.imports import parse_file
from apps.benchmarks.models import (
    MAX_LEVELS,
    MAX_SCENARIOS,
    MAX_SLO_TPOT_S,
    MAX_SLO_TTFT_S,
    Suite,
    validate_depths,
    validate_levels,
    validate_rates,
    validate_scenarios,
)
from apps.benchmarks.peer_files import MAX_FILE_BYTES, FileProblem
from apps.hosts.forms import HostChoiceField
from apps.recipes.models import Recipe


class JobQueueForm(forms.Form):
    suite = forms.ModelChoiceField(queryset=Suite.objects.all(), empty_label=None)
    recipe = forms.ModelChoiceField(queryset=Recipe.objects.all(), empty_label=None)
    # In service, an offline one marked; a retired host posted anyway: job_admission refuses.
    host = HostChoiceField(empty_label=None)
    note = forms.CharField(max_length=200, required=False,
                           help_text="Why (e.g. “after the nightly image update”).")  # fmt: skip


class CompareForm(forms.Form):
    jobs = forms.TypedMultipleChoiceField(coerce=int, choices=())

    def __init__(self, *args, job_ids: list[int], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["jobs"].choices = [(pk, pk) for pk in job_ids]


# A token count as typed: ASCII digits only ("²".isdigit() is true, int("²") fails), and no
# more of them than the largest bound needs (int() of 5,000 digits is refused by Python).
_COUNT = re.compile(r"\d{1,9}", re.ASCII)
# A rate as typed: ASCII digits with at most one decimal point, bounded in length.
_RATE = re.compile(r"\d{1,6}(\.\d{1,6})?|\.\d{1,6}", re.ASCII)


class SuiteForm(forms.ModelForm):
    """Scenarios as lines of `name: prompt/output`, levels as `1, 2, 4`: easy to type."""

    scenarios_text = forms.CharField(
        label="Single-stream scenarios",
        max_length=MAX_SCENARIOS * 120,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text="One per line: name: prompt tokens/generated tokens, e.g. "
        "“long prompt, short gen: 7234/32”.",
    )
    levels_text = forms.CharField(
        label="Concurrency levels",
        required=False,
        max_length=MAX_LEVELS * 6,
        help_text="e.g. 1, 2, 4, 8, 16 — empty means 1, 2, 4, … up to twice the recipe's "
        "max-num-seqs.",
    )

    depths_text = forms.CharField(
        label="Context-depth sweep (tokens)",
        required=False,
        max_length=MAX_LEVELS * 10,
        help_text="e.g. 0, 4096, 16384, 32768 — the same short question after that much "
        "context, one single-stream level each (empty: none).",
    )
    rates_text = forms.CharField(
        label="Request rates (req/s)",
        required=False,
        max_length=MAX_LEVELS * 12,
        help_text="For a rate sweep, e.g. 0.5, 1, 2, 4 — each is one level; once a level's "
        "backlog grows without bound it ends early and the higher rates are not run.",
    )

    class Meta:
        model = Suite
        fields = ["name", "description", "endpoint", "repetitions", "warmup_requests",
                  "length_kind", "length_spread", "shared_prefix_groups",
                  "shared_prefix_tokens", "warm_prefix",
                  "sweep_enabled", "sweep_mode", "sweep_prompt_tokens", "sweep_output_tokens",
                  "sweep_dataset", "session_turns", "think_time_s", "followup_tokens",
                  "requests_per_level", "arrival_kind", "burstiness", "rate_max_concurrency",
                  "ramp_up_s", "arrival_seed", "slo_ttft_s", "slo_tpot_s"]  # fmt: skip
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.initial["scenarios_text"] = "\n".join(
                f"{s['name']}: {s['prompt_tokens']}/{s['output_tokens']}"
                for s in self.instance.scenarios
            )
            self.initial["levels_text"] = ", ".join(str(c) for c in self.instance.sweep_levels)
            self.initial["rates_text"] = ", ".join(f"{r:g}" for r in self.instance.sweep_rates)
            self.initial["depths_text"] = ", ".join(str(d) for d in self.instance.context_depths)
        # the field order above puts the rates after the concurrency levels
        order = list(self.fields)
        order.remove("rates_text")
        order.insert(order.index("levels_text") + 1, "rates_text")
        order.remove("depths_text")
        order.insert(order.index("scenarios_text") + 1, "depths_text")
        self.order_fields(order)

    def clean_scenarios_text(self) -> list[dict]:
        scenarios = []
        for number, line in enumerate(self.cleaned_data["scenarios_text"].splitlines(), 1):
            if not line.strip():
                continue
            name, sep, shape = line.rpartition(":")
            prompt, slash, output = shape.strip().partition("/")
            counts = _COUNT.fullmatch(prompt.strip()) and _COUNT.fullmatch(output.strip())
            if not sep or not slash or not counts:
                raise forms.ValidationError(
                    f"Line {number} (“{line.strip()[:60]}”): write it as name: prompt/generated, "
                    "e.g. “judge call: 58/2”."
                )
            scenarios.append(
                {
                    "name": name.strip() or shape.strip(),
                    "prompt_tokens": int(prompt),
                    "output_tokens": int(output),
                }
            )
        if not scenarios:
            raise forms.ValidationError("Give at least one scenario.")
        validate_scenarios(scenarios)
        return scenarios

    def clean_levels_text(self) -> list[int]:
        return _numbers(self.cleaned_data["levels_text"], _COUNT, validate_levels,
                        "Whole numbers separated by commas, e.g. 1, 2, 4, 8.")  # fmt: skip

    def clean_depths_text(self) -> list[int]:
        return _numbers(self.cleaned_data["depths_text"], _COUNT, validate_depths,
                        "Whole numbers of tokens separated by commas, e.g. 0, 4096.")  # fmt: skip

    def clean_rates_text(self) -> list[float]:
        return _numbers(self.cleaned_data["rates_text"], _RATE, validate_rates,
                        "Requests per second separated by commas, e.g. 0.5, 1, 2, 4.")  # fmt: skip

    def clean(self):
        data = super().clean()
        # The model's clean() (bounds across fields) sees what will be saved.
        if "scenarios_text" in data:
            self.instance.scenarios = data["scenarios_text"]
        if "levels_text" in data:
            self.instance.sweep_levels = data["levels_text"]
        if "rates_text" in data:
            self.instance.sweep_rates = data["rates_text"]
        if "depths_text" in data:
            self.instance.context_depths = data["depths_text"]
        return data

    def save(self, commit: bool = True) -> Suite:
        self.instance.scenarios = self.cleaned_data["scenarios_text"]
        self.instance.sweep_levels = self.cleaned_data["levels_text"]
        self.instance.sweep_rates = self.cleaned_data["rates_text"]
        self.instance.context_depths = self.cleaned_data["depths_text"]
        return super().save(commit)


def _numbers(text: str, pattern: re.Pattern, validate, example: str) -> list:
    """A comma-separated list as typed (`pattern` bounds each item's form and length), then
    the model's own validation; empty text is an empty list."""
    values = [v for v in text.replace(" ", "").split(",") if v]
    if not all(pattern.fullmatch(v) for v in values):
        raise forms.ValidationError(example)
    numbers = [int(v) if v.isdigit() else float(v) for v in values]
    validate(numbers)
    return numbers


class ImportForm(forms.Form):
    """Results measured elsewhere (apps/benchmarks/imports.py): the file, and what it
    measured. The file is read and checked here; nothing is saved unless all of it is good."""

    file = forms.FileField(
        help_text="A file of `vllm bench serve --save-result --save-detailed` (one run, or "
        "one a line: --append-result, and this panel's own “vllm bench JSON” export), or a "
        "GuideLLM JSON report (`guidellm run … --output kind=json`)."
    )
    recipe = forms.ModelChoiceField(
        Recipe.objects.all(), help_text="The recipe it measured: its model and flags."
    )
    # Where it ran: no worker is needed (nothing runs), but a retired Spark takes nothing new.
    host = HostChoiceField(refuse_retired=True, mark_offline=False, label="Spark",
                           help_text="Where it ran.")  # fmt: skip
    note = forms.CharField(max_length=200, required=False)
    slo_ttft_s = forms.FloatField(
        required=False, min_value=0.001, max_value=MAX_SLO_TTFT_S,
        label="SLO: TTFT p95 at most (s)",
        help_text="For the capacity answer; empty: the suites' default (2 s).",
    )  # fmt: skip
    slo_tpot_s = forms.FloatField(
        required=False, min_value=0.0001, max_value=MAX_SLO_TPOT_S,
        label="SLO: time per output token at most (s)", help_text="Empty: 0.1 s (10 tok/s).",
    )  # fmt: skip

    def clean_file(self):
        upload = self.cleaned_data["file"]
        if upload.size > MAX_FILE_BYTES:
            raise forms.ValidationError(
                f"The file is {upload.size / 2**20:.1f} MiB; at most {MAX_FILE_BYTES // 2**20} MiB."
            )
        raw = upload.read()
        try:
            self.source, self.levels = parse_file(raw, upload.name or "the file")
        except FileProblem as exc:
            raise forms.ValidationError(str(exc)) from None
        return upload

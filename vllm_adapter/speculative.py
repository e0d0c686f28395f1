"""Speculative decoding as vLLM runs it: what `--speculative-config` asks for and how many
of the drafted tokens the target model accepts.

A step with speculative decoding drafts `k = num_speculative_tokens` tokens per sequence
(k passes of an MTP layer, an EAGLE head or a draft model; a prompt lookup for n-gram and
suffix decoding, no GPU pass at all; DFlash drafts its block in one pass), then the target
model verifies all 1 + k positions in one forward pass and keeps the accepted prefix plus
one token of its own. Position i of a draft is accepted only if every position before it
was: vLLM logs and exports the *unconditional* rate of each position (the share of drafts
whose first i + 1 tokens were all accepted: "Per-position acceptance rate: 0.812, 0.583,
0.412" and `vllm:spec_decode_num_accepted_tokens_per_pos / vllm:spec_decode_num_drafts`),
and the mean acceptance length is 1 + their sum (vllm/v1/spec_decode/metrics.py).

How many tokens are accepted depends on the model, the drafter and above all the text: chat
and code accept far more than random tokens. A recipe states its own with vLLM's synthetic
rejection sampler (`"rejection_sample_method": "synthetic"` and `synthetic_acceptance_rates`
or `synthetic_acceptance_length`, vllm/config/speculative.py), which real vLLM then imposes
and the planner, the roofline and sparksim all use; otherwise a default per method, from
public measurements (DEFAULT_ACCEPTANCE, each with its source), labelled "default".
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = [
    "DEFAULT_ACCEPTANCE",
    "MAX_SPECULATIVE_TOKENS",
    "MODEL_MTP_ACCEPTANCE",
    "Speculation",
    "SpeculationError",
    "conditional_rates",
    "default_acceptance",
    "from_config",
    "method_family",
    "method_of",
]

# vLLM caps a step's draft at 128 tokens (v1/sample/rejection_sampler.py MAX_SPEC_LEN); a
# bound on the work one recipe can ask of the model.
MAX_SPECULATIVE_TOKENS = 128

MTP, EAGLE, DFLASH, DRAFT_MODEL, LOOKUP = "mtp", "eagle", "dflash", "draft_model", "lookup"


def method_family(method: str) -> str:
    """The kind of drafter a vLLM method name runs: "mtp" (the model's own multi-token-
    prediction layers: `mtp`, `deepseek_mtp`, `qwen3_5_mtp` … every `*_mtp`), "eagle"
    (`eagle`, `eagle3`, `medusa`, `mlp_speculator`: a small head on the target's hidden
    states), "dflash" (`dflash`, `dspark`: a block drafted in one pass), "draft_model" (a
    smaller model of the same family) or "lookup" (`ngram`, `ngram_gpu`, `suffix`: tokens
    looked up in the prompt and output so far, no drafter weights)."""
    m = (method or "").strip().lower()
    if m == "mtp" or m.endswith("_mtp"):
        return MTP
    if m in ("ngram", "ngram_gpu", "suffix"):
        return LOOKUP
    if m in ("dflash", "dspark"):
        return DFLASH
    if m == "draft_model":
        return DRAFT_MODEL
    return EAGLE


def method_of(config: dict) -> str:
    """The method of a speculative config: as given, else what vLLM infers from the draft
    model it names (an EAGLE head by its name, else a draft model); "" with neither."""
    method = str(config.get("method") or "")
    draft = str(config.get("model") or "")
    if method or not draft:
        return method
    low = draft.lower()
    return "eagle3" if "eagle3" in low else "eagle" if "eagle" in low else "draft_model"


@dataclass(frozen=True)
class DefaultAcceptance:
    """Conditional acceptance by position — each the chance that position is accepted when
    every one before it was — then `tail` for every later position."""

    conditional: tuple[float, ...]
    tail: float
    source: str

    def rates(self, k: int) -> tuple[float, ...]:
        """The unconditional per-position rates of a k-token draft."""
        cond = list(self.conditional[:k]) + [self.tail] * max(k - len(self.conditional), 0)
        return _unconditional(tuple(cond))


# Defaults per drafter kind, from public vLLM measurements of chat-like text at the models'
# own sampling settings (conditional rates derived from vLLM's unconditional per-position
# figures as r_i / r_(i-1)); docs/recipes.md "Speculative decoding" lists them.
DEFAULT_ACCEPTANCE: dict[str, DefaultAcceptance] = {
    MTP: DefaultAcceptance(
        (0.82, 0.72), 0.70,
        "the median of vLLM's MTP measurements on Nemotron-3 Super, Qwen3.5/3.6, Gemma 4 and "
        "DeepSeek (per model below)",
    ),
    EAGLE: DefaultAcceptance(
        (0.72, 0.71, 0.67), 0.65,
        "vLLM's EAGLE-3 acceptance baselines on MT-Bench (Llama-3.1-8B 0.73/0.52/0.35, "
        "gpt-oss-20b 0.72/0.51/0.33: tests/v1/spec_decode/test_acceptance_length.py)",
    ),
    DFLASH: DefaultAcceptance(
        (0.68, 0.64, 0.65, 0.68, 0.75, 0.80, 0.85, 0.90), 0.92,
        "DFlash on a GB10, ShareGPT, 15 tokens: mean acceptance length 3.36 "
        "(djangodevreng/dgx-spark-benchmarks, muse-glimmer bf16-spec 08-sharegpt)",
    ),
    DRAFT_MODEL: DefaultAcceptance(
        (0.70, 0.65), 0.60, "an assumption: no public vLLM per-position figures for a draft model"
    ),
    LOOKUP: DefaultAcceptance(
        (0.22, 0.85, 0.90, 0.93), 0.95,
        "n-gram lookup on chat: a draft exists in about a quarter to a third of steps "
        "(SGLang and vLLM on chat text, about 20 % accepted); given one, 0.72/0.85/0.90 "
        "(vLLM PR #24344 on code edits, where drafts exist far more often)",
    ),
}  # fmt: skip

# An MTP head is trained with its model: where public vLLM measurements of a family's own
# head exist, they beat the MTP median above (config.json `model_type`).
MODEL_MTP_ACCEPTANCE: dict[str, DefaultAcceptance] = {
    "nemotron_h": DefaultAcceptance(
        (0.75, 0.67), 0.64,
        "Nemotron-3 Super NVFP4 MTP on a GB10, vLLM 0.26: 0.757/0.503/0.323, mean acceptance "
        "length 2.50–2.62 over ShareGPT and load sweeps (djangodevreng/dgx-spark-benchmarks "
        "tests 07–11)",
    ),
    "qwen3_5_moe": DefaultAcceptance(
        (0.886, 0.878), 0.80,
        "Qwen3.6-35B-A3B MTP on a GB10: 0.886/0.778, mean acceptance length 2.66 "
        "(eugr/spark-vllm-docker PR #200); Qwen3.6-27B 0.963/0.804/0.640",
    ),
    "gemma4": DefaultAcceptance(
        (0.84, 0.71, 0.64), 0.70,
        "Gemma-4-26B-A4B NVFP4 MTP on a GB10: 0.844/0.599/0.385/0.271 "
        "(eugr/spark-vllm-docker issue #343)",
    ),
    "deepseek_v3": DefaultAcceptance(
        (0.81,), 0.47,
        "DeepSeek-R1 MTP in vLLM: 81–82 % at one token (vLLM PR #12755); V4-Flash 0.70/0.29",
    ),
    "glm4_moe": DefaultAcceptance(
        (0.80,), 0.10,
        "GLM-4.6 MTP in vLLM: one token helps, a second is 'near 0' accepted (vLLM #25993)",
    ),
}  # fmt: skip
for _same, _as in (("qwen3_5", "qwen3_5_moe"), ("qwen3_next", "qwen3_5_moe"),
                   ("qwen3_5_text", "qwen3_5_moe"), ("qwen3_5_moe_text", "qwen3_5_moe"),
                   ("gemma4_text", "gemma4"), ("deepseek_v32", "deepseek_v3"),
                   ("glm4_moe_lite", "glm4_moe")):  # fmt: skip
    MODEL_MTP_ACCEPTANCE[_same] = MODEL_MTP_ACCEPTANCE[_as]


def default_acceptance(family: str, model_type: str = "") -> DefaultAcceptance:
    """The default acceptance of a drafter kind (and, for MTP, of the model's own head)."""
    if family == MTP and model_type in MODEL_MTP_ACCEPTANCE:
        return MODEL_MTP_ACCEPTANCE[model_type]
    return DEFAULT_ACCEPTANCE[family]


class SpeculationError(ValueError):
    """A speculative config vLLM would refuse, in vLLM's words where it has them."""


@dataclass(frozen=True)
class Speculation:
    """One recipe's speculative decoding."""

    method: str  # vLLM's method name, as given (or inferred from the draft model)
    num_tokens: int  # num_speculative_tokens: k
    draft_model: str | None  # `model`: a draft model or an EAGLE / DFlash head
    rates: tuple[float, ...]  # unconditional acceptance per position (vLLM's convention)
    stated: bool  # the recipe stated its acceptance (synthetic rejection sampling)
    source: str  # where the rates come from, in words
    parallel_drafting: bool = False  # every draft token in one drafter pass

    @property
    def family(self) -> str:
        return method_family(self.method)

    @property
    def mean_accepted(self) -> float:
        """Accepted draft tokens per draft: the sum of the per-position rates."""
        return float(sum(self.rates))

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens a step gives each sequence: the accepted drafts plus the target's own
        (vLLM's "Mean acceptance length", which counts that bonus token)."""
        return 1.0 + self.mean_accepted

    @property
    def acceptance_rate(self) -> float:
        """Accepted ÷ drafted tokens (vLLM's "Avg Draft acceptance rate")."""
        return self.mean_accepted / self.num_tokens if self.num_tokens else 0.0

    @property
    def draft_passes(self) -> int:
        """Drafter forward passes a step runs: none for a lookup, one for a block drafter
        (DFlash, or parallel drafting), else one per draft token."""
        if self.family == LOOKUP:
            return 0
        if self.family == DFLASH or self.parallel_drafting:
            return 1
        return self.num_tokens

    @property
    def conditional(self) -> tuple[float, ...]:
        return conditional_rates(self.rates)

    def describe(self) -> str:
        rates = ", ".join(f"{r:.2f}" for r in self.rates)
        return (
            f"{self.method}, {self.num_tokens} token{'s' if self.num_tokens != 1 else ''}: "
            f"mean acceptance length {self.mean_acceptance_length:.2f} "
            f"(per position {rates}; {'stated by the recipe' if self.stated else 'default'})"
        )


def conditional_rates(unconditional: tuple[float, ...] | list[float]) -> tuple[float, ...]:
    """Per-position probability of acceptance given the position before was accepted, from
    the unconditional rates (vllm/v1/spec_decode/utils.py unconditional_to_conditional_rates:
    r_i / r_(i-1), 0 once a rate is 0)."""
    out, before = [], 1.0
    for rate in unconditional:
        out.append(rate / before if before > 0 else 0.0)
        before = rate
    return tuple(min(max(x, 0.0), 1.0) for x in out)


def _length_to_rates(length: float, n: int) -> list[float]:
    """vLLM's minimum-variance schedule for a target mean acceptance length
    (SpeculativeConfig._acceptance_length_to_rates)."""
    drafts = length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (n - full - 1))[:n]


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpeculationError(f"{what} must be a number, not {value!r}.")
    return float(value)


def _stated_rates(config: dict, n: int) -> list[float] | None:
    """The acceptance a recipe states through vLLM's synthetic rejection sampler, validated
    as vLLM validates it (vllm/config/speculative.py _resolve_synthetic_acceptance_rates)."""
    if config.get("rejection_sample_method") != "synthetic":
        return None
    rates, length = (
        config.get("synthetic_acceptance_rates"),
        config.get("synthetic_acceptance_length"),
    )
    if (rates is None) == (length is None):
        raise SpeculationError(
            "rejection_sample_method='synthetic' requires exactly one of "
            "synthetic_acceptance_rates or synthetic_acceptance_length."
        )
    if rates is not None:
        if not isinstance(rates, list) or len(rates) != n:
            raise SpeculationError(f"synthetic_acceptance_rates must have length {n}, got {rates}.")
        values = [_number(r, "synthetic_acceptance_rates") for r in rates]
        if not all(0.0 <= r <= 1.0 for r in values):
            raise SpeculationError(
                f"synthetic_acceptance_rates entries must be in [0, 1], got {rates}."
            )
        if any(values[i] > values[i - 1] for i in range(1, n)):
            raise SpeculationError(
                f"synthetic_acceptance_rates must be non-increasing, got {rates}."
            )
        return values
    value = _number(length, "synthetic_acceptance_length")
    if not 1.0 <= value <= float(n + 1):
        raise SpeculationError(
            f"synthetic_acceptance_length must be in [1, {n + 1}], got {length}."
        )
    return _length_to_rates(value, n)


def from_config(config, mtp_layers: int = 1, model_type: str = "") -> Speculation | None:
    """The speculation of a `--speculative-config` value (its JSON text or the dict vLLM
    parses it to); None when there is none. SpeculationError for one vLLM refuses.
    `mtp_layers`: the model's MTP layers (num_nextn_predict_layers), what vLLM drafts with
    an MTP method when the config leaves num_speculative_tokens out; `model_type`: its
    config.json `model_type`, whose own MTP head may have a measured default."""
    if config in (None, "", {}):
        return None
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as exc:
            raise SpeculationError(f"--speculative-config is not JSON: {exc.msg}") from None
    if not isinstance(config, dict):
        raise SpeculationError("--speculative-config must be a JSON object.")
    draft = config.get("model")
    draft = str(draft) if draft else None
    method = method_of(config)
    if not method:
        raise SpeculationError("--speculative-config needs a method or a draft model (`model`).")
    raw_n = config.get("num_speculative_tokens")
    if raw_n is None:
        # vLLM's defaults (vllm/config/speculative.py): an MTP method drafts with each of
        # the model's MTP layers once; suffix decoding drafts up to its tree depth (24).
        if method_family(method) == MTP:
            raw_n = max(int(mtp_layers or 1), 1)
        elif method == "suffix":
            raw_n = int(config.get("suffix_decoding_max_tree_depth") or 24)
        else:
            raise SpeculationError(
                "num_speculative_tokens must be provided with speculative model unless the "
                "draft model config contains an n_predict parameter."
            )
    n = int(_number(raw_n, "num_speculative_tokens"))
    if not 1 <= n <= MAX_SPECULATIVE_TOKENS:
        raise SpeculationError(
            f"num_speculative_tokens must be between 1 and {MAX_SPECULATIVE_TOKENS}, got {raw_n}."
        )
    stated = _stated_rates(config, n)
    family = method_family(method)
    if stated is not None:
        rates, source = tuple(stated), "stated by the recipe (synthetic rejection sampling)"
    else:
        default = default_acceptance(family, model_type)
        rates, source = default.rates(n), f"default for {family}: {default.source}"
    return Speculation(
        method=method, num_tokens=n, draft_model=draft, rates=rates, stated=stated is not None,
        source=source, parallel_drafting=bool(config.get("parallel_drafting")),
    )  # fmt: skip


def _unconditional(conditional: tuple[float, ...]) -> tuple[float, ...]:
    out, running = [], 1.0
    for c in conditional:
        running *= c
        out.append(round(running, 6))
    return tuple(out)

"""Read a Hugging Face `config.json` (and ModelOpt's `hf_quant_config.json`) into recipe fields.

Pure Python, no Django: the wizard, the recipe form and the API all call
`parse_hf_config()` with the text a user pasted or uploaded. The planner needs the
architecture numbers that decide KV-cache and recurrent-state memory (SPEC §2), and
every model family spells them differently, so this package is the one place that knows
the spellings: dense transformers, sliding-window models (gpt-oss), Mamba2 hybrids
(Nemotron-H), Gated DeltaNet hybrids (Qwen3-Next / Qwen3.5), MLA (DeepSeek) and the
quantization configs of ModelOpt, MXFP4, FP8, AWQ, GPTQ and compressed-tensors.

It never guesses a number it cannot read: what is missing goes into `notes` as a
sentence for the user, and the field stays out of `fields` so the form keeps whatever
the user typed.

By concern: ``document`` (the bounded JSON read and typed single values), ``architecture``
(layers that keep KV, heads or MLA latent, recurrent state, experts), ``quantization``
(weight format, --quantization, checkpoint KV dtype) and ``config_import``
(``parse_hf_config`` itself). Every public name is importable from here.
"""

from sparkdomain.hf_config.architecture import (
    CONV_STATE_BYTES,
    EXPERT_COUNT_KEYS,
    EXPERTS_PER_TOKEN_KEYS,
    FULL_ATTENTION_TYPES,
    LINEAR_ATTENTION_TYPES,
    MAMBA_TYPES,
    MIB,
    PURE_STATE_SPACE_MODEL_TYPES,
    SHARED_EXPERT_KEYS,
    SLIDING_ATTENTION_TYPES,
    SSM_STATE_BYTES,
)
from sparkdomain.hf_config.config_import import (
    MESSAGE_CHARS,
    NOTES_SHOWN,
    PARAMS_NOTE,
    HFConfigImport,
    parse_hf_config,
)
from sparkdomain.hf_config.document import (
    LAYER_COUNT_KEYS,
    NESTED_LANGUAGE_KEYS,
    ConfigImportError,
)
from sparkdomain.hf_config.quantization import LOW_BIT_FORMATS, TORCH_DTYPES

__all__ = [
    "CONV_STATE_BYTES",
    "EXPERTS_PER_TOKEN_KEYS",
    "EXPERT_COUNT_KEYS",
    "FULL_ATTENTION_TYPES",
    "LAYER_COUNT_KEYS",
    "LINEAR_ATTENTION_TYPES",
    "LOW_BIT_FORMATS",
    "MAMBA_TYPES",
    "MESSAGE_CHARS",
    "MIB",
    "NESTED_LANGUAGE_KEYS",
    "NOTES_SHOWN",
    "PARAMS_NOTE",
    "PURE_STATE_SPACE_MODEL_TYPES",
    "SHARED_EXPERT_KEYS",
    "SLIDING_ATTENTION_TYPES",
    "SSM_STATE_BYTES",
    "TORCH_DTYPES",
    "ConfigImportError",
    "HFConfigImport",
    "parse_hf_config",
]

"""Import a sparkrun recipe (YAML, already parsed) into SparkPanel recipe fields.

sparkrun (github.com/scitrera/sparkrun) is the CLI many DGX Spark owners launch models
with; its recipes are the format people will paste into the panel. The format is
documented in sparkrun's RECIPES.md:

    model: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4
    runtime: vllm
    container: scitrera/dgx-spark-vllm:0.16.0-t5
    metadata: {description: ..., model_params: 30B, model_dtype: nvfp4, kv_dtype: ...,
               num_layers: ..., num_kv_heads: ..., head_dim: ..., model_vram: ...}
    defaults: {port: 8000, host: 0.0.0.0, tensor_parallel: 1,
               gpu_memory_utilization: 0.8, max_model_len: 200000, served_model_name: ...}
    env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"}
    command: |
      vllm serve {model} --max-model-len {max_model_len} ... --max-num-seqs 4

`defaults` only fill `{placeholders}` in `command`, and real recipes often write flags
such as `--max-num-seqs` straight into the command, so the command is read too: it is
what sparkrun actually runs, and where it disagrees with a default it wins.

Pure Python, no Django. Nothing here enforces the ≤ 0.90 utilization rule: the caller's
form validates every field, so this package only checks that values have the right type
and reports each problem against its key path.

By concern: ``importer`` (``parse_sparkrun``, ``looks_like_sparkrun``, the top-level keys
and the runtime check), ``sections`` (defaults, metadata and env onto recipe fields),
``values`` (the typed readers and vocabularies), ``command_flags`` (the flags in the
command), ``placeholders`` (the bounded ``{placeholder}`` rendering) and ``recipe`` (the
result and its errors). Every public name is importable from here.
"""

from sparkdomain.sparkrun.importer import (
    TOP_LEVEL_IGNORED,
    TOP_LEVEL_MAPPED,
    VLLM_RUNTIMES,
    looks_like_sparkrun,
    parse_sparkrun,
)
from sparkdomain.sparkrun.placeholders import (
    MAX_COMMAND_CHARS,
    MAX_PLACEHOLDER_DEPTH,
    PlaceholderError,
)
from sparkdomain.sparkrun.recipe import SparkrunImportError, SparkrunRecipe
from sparkdomain.sparkrun.sections import (
    DEFAULTS_FIELDS,
    DEFAULTS_IGNORED,
    METADATA_FIELDS,
    METADATA_IGNORED,
    METADATA_SPECIAL,
)
from sparkdomain.sparkrun.structured import VLLM_FLAG_MAP, structured_argv
from sparkdomain.sparkrun.values import (
    CHECKPOINT_DETECTED,
    CHECKPOINT_KV_DTYPES,
    KV_CACHE_DTYPES,
    QUANTIZATION_ALIASES,
    WEIGHT_FORMATS,
    Reader,
)

__all__ = [
    "CHECKPOINT_DETECTED",
    "CHECKPOINT_KV_DTYPES",
    "DEFAULTS_FIELDS",
    "DEFAULTS_IGNORED",
    "KV_CACHE_DTYPES",
    "MAX_COMMAND_CHARS",
    "MAX_PLACEHOLDER_DEPTH",
    "METADATA_FIELDS",
    "METADATA_IGNORED",
    "METADATA_SPECIAL",
    "QUANTIZATION_ALIASES",
    "TOP_LEVEL_IGNORED",
    "TOP_LEVEL_MAPPED",
    "VLLM_FLAG_MAP",
    "VLLM_RUNTIMES",
    "WEIGHT_FORMATS",
    "PlaceholderError",
    "Reader",
    "SparkrunImportError",
    "SparkrunRecipe",
    "looks_like_sparkrun",
    "parse_sparkrun",
    "structured_argv",
]

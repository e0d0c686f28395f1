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

What the recipe runs is the `vllm serve` command sparkrun 0.4 would run: `command:` with
its `{placeholders}` filled from `defaults`, or, without one, the command sparkrun builds
from `defaults`; that vector is read option by option onto the recipe (docs/recipes.md,
"sparkrun and eugr recipes, key by key").

Pure Python, no Django. Nothing here enforces the ≤ 0.90 utilization rule: the caller's
form validates every field, so this package only reads values and reports each problem
against its key path.

By concern: ``importer`` (``parse_sparkrun``, ``looks_like_sparkrun``, the top-level keys,
variants, mods and mounts), ``placeholders`` (sparkrun's bounded ``{placeholder}``
rendering), ``structured`` (the command sparkrun builds from defaults), ``vector`` (the
command's options onto recipe fields), ``overrides`` (sparkrun's conditional layers),
``sections`` (metadata, name, description, env), ``values`` (the typed readers),
``recipe`` (the result and its errors), ``export`` (a recipe as sparkrun YAML) and
``registry`` (a registry's layout and includes). The importer's public names are
importable from here.
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
    CHECKPOINT_KV_DTYPES,
    WEIGHT_FORMATS,
    Reader,
)

__all__ = [
    "CHECKPOINT_KV_DTYPES",
    "DEFAULTS_FIELDS",
    "DEFAULTS_IGNORED",
    "MAX_COMMAND_CHARS",
    "MAX_PLACEHOLDER_DEPTH",
    "METADATA_FIELDS",
    "METADATA_IGNORED",
    "METADATA_SPECIAL",
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

"""Which environment variables a recipe may set for its vLLM server. Pure Python.

Real recipes tune vLLM and the libraries under it through the environment
(`VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`, `VLLM_USE_FLASHINFER_MOE_FP4=1`, `NCCL_IB_DISABLE=0`,
`TORCH_CUDA_ARCH_LIST=12.1a`). A variable is kept when its name starts with one of the
prefixes below (vLLM and the libraries it runs: NCCL, PyTorch's CUDA settings,
FlashInfer, DeepGEMM, Triton, CUTLASS) and no rule on its name denies it — the same rules
as a `vllm serve` option's name (`sparkdomain/option_rules.py`): nothing that names a file,
a folder, a plugin or a class (code from outside the image), a network endpoint, a secret,
or memory outside --gpu-memory-utilization, and the few the panel sets itself. docs/recipes.md
("Environment") lists them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sparkdomain.bounded import clip

PREFIXES = (
    "VLLM_", "NCCL_", "TORCH_", "PYTORCH_", "FLASHINFER_", "DG_", "TRITON_", "CUTLASS_",
    "CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM",
    "SAFETENSORS_FAST_GPU", "HF_HUB_ENABLE_HF_TRANSFER", "TIKTOKEN_ENCODINGS_BASE",
)  # fmt: skip
NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")
MAX_VARIABLES = 64
MAX_VALUE_CHARS = 4096

# The panel's own (it sets them for every run) and what would reach outside the image.
PANEL_OWNED = {
    "VLLM_API_KEY": "the panel gives each run its own API key",
    "VLLM_HOST_IP": "the panel places each run and sets its addresses",
    "VLLM_PORT": "the panel places each run and sets its ports",
    "CUDA_VISIBLE_DEVICES": "the engine gives a run its GPU",
    "VLLM_USE_MODELSCOPE": "models come from the Hugging Face Hub or the host's cache",
    "VLLM_SERVER_DEV_MODE": "it opens development endpoints (sleep, reset, collective RPC)",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "it lets clients load LoRA adapters from paths",
    "VLLM_CONFIGURE_LOGGING": "the panel reads the server's log",
    "VLLM_LOGGING_LEVEL": "the panel reads the server's log",
}
_DENY_TOKENS = {
    "PATH": "names a file or folder outside the image",
    "PATHS": "names a file or folder outside the image",
    "DIR": "names a file or folder outside the image",
    "FILE": "names a file or folder outside the image",
    "ROOT": "names a file or folder outside the image",
    "PLUGIN": "loads a plugin (code from outside the image)",
    "PLUGINS": "loads a plugin (code from outside the image)",
    "CLASS": "names code to import",
    "MODULE": "names code to import",
    "HOST": "names a network endpoint",
    "PORT": "names a network endpoint",
    "ADDR": "names a network endpoint",
    "IP": "names a network endpoint",
    "URL": "names a network endpoint",
    "URI": "names a network endpoint",
    "ENDPOINT": "names a network endpoint",
    "IFNAME": "picks the network interfaces (the panel sets a pair's link)",
    "KEY": "would hold a secret",
    "TOKEN": "would hold a secret",
    "SECRET": "would hold a secret",
    "PASSWORD": "would hold a secret",
    "MEMORY": "sizes memory outside --gpu-memory-utilization",
    "OFFLOAD": "sizes memory outside --gpu-memory-utilization",
    "SWAP": "sizes memory outside --gpu-memory-utilization",
    "SPACE": "sizes memory outside --gpu-memory-utilization",
}
# A plugin variable set to "none" turns a plugin off, which is what recipes use it for.
_OFF = {"none", ""}


def variable_problem(name: object, value: object) -> str | None:
    """Why a recipe may not set `name=value` (None: it may)."""
    if not isinstance(name, str) or not NAME.match(name):
        return f"{clip(name, 60)!s}: a variable name is upper-case letters, digits and _"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"{name}: the value must be text or a number"
    text = str(value)
    if len(text) > MAX_VALUE_CHARS:
        return f"{name}: the value is over {MAX_VALUE_CHARS:,} characters"
    if re.search(r"[\x00-\x1f\x7f]", text):
        return f"{name}: the value contains a control character"
    if name in PANEL_OWNED:
        return f"{name} is the panel's: {PANEL_OWNED[name]}"
    if not name.startswith(PREFIXES):
        return (
            f"{name} does not tune vLLM: a recipe may set variables of vLLM and the "
            f"libraries it runs ({', '.join(p.rstrip('_') for p in PREFIXES[:8])}…)"
        )
    for token in name.split("_"):
        reason = _DENY_TOKENS.get(token)
        if reason is None:
            continue
        if token.startswith("PLUGIN") and text.strip().lower() in _OFF:
            continue
        return f"{name} {reason}: ask an admin to build it into an image"
    return None


def env_problems(env: object) -> list[str]:
    """Every problem with a recipe's environment (a mapping of names to values)."""
    if env in (None, ""):
        return []
    if not isinstance(env, Mapping):
        return ["the environment is a mapping of variable names to values"]
    if len(env) > MAX_VARIABLES:
        return [f"at most {MAX_VARIABLES} variables"]
    return [p for name, value in env.items() if (p := variable_problem(name, value))]

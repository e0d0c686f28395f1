"""How vLLM lays out the KV cache, and what that gives: the block size, the page of each
layer, the groups, the blocks a full-length request needs, the blocks that fit, and the
"GPU KV cache size" / "Maximum concurrency" lines — per vLLM version (rules.py says which
rule a version follows). Pure arithmetic; every rule cites where vLLM has it (0.33.0 paths;
the older files are named in rules.py).

- A full/sliding attention page is `block_size × kv_heads_per_rank × (head_dim + head_dim_v)
  × kv_bytes` (`v1/kv_cache_interface.py`, AttentionSpec.page_size_bytes); an MLA page
  `block_size × (kv_lora_rank + qk_rope_head_dim) × kv_bytes`.
- A Mamba2 / gated-delta-net page is one whole state: `conv_rows × conv_width × conv_bytes +
  temporal × ssm_bytes` (MambaSpec.page_size_bytes); its conv rows widen by the speculative
  tokens (`mamba_utils.py`).
- A hybrid raises the attention block size to the smallest multiple of the alignment whose
  page holds a state (`platforms/interface.py::_align_hybrid_block_size`), and pads the
  state pages to it.
- Layers are bucketed by spec (draft layers join the target's bucket); a bucket splits into
  groups of `g = min(bucket sizes)` layers (or the largest when max < 1.5 × min), the last
  padded (`kv_cache_planning.py::_get_kv_cache_groups_uniform_page_size`).
- `bytes_per_block = max over groups of Σ page`; `num_blocks = available // bytes_per_block`.
- Per request at max_model_len L: full `cdiv(L, bs)`, sliding
  `cdiv(min(W - 1 + in_flight, L), bs) + 1`, a state `1 + ns` (no prefix caching) or
  `2 + ns + ckpt` ("align" mode).
- `max_concurrency = num_blocks / Σ_groups blocks_per_request`; the tokens line is
  `int(max_concurrency × L)` (rules.py: older versions print other things for hybrids).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from vllm_adapter import speculative
from vllm_adapter.startup.model import (
    DTYPE_BYTES,
    FULL,
    GDN,
    MAMBA2,
    MLA,
    SLIDING,
    Layer,
    TextModel,
)
from vllm_adapter.startup.rules import Rules

GIB = 1 << 30
DEFAULT_BLOCK_SIZE = 16  # config/cache.py: CacheConfig.DEFAULT_BLOCK_SIZE
MLA_HYBRID_MIN_BLOCK = 128


@dataclass(frozen=True)
class CacheOptions:
    """What the command sets that shapes the KV cache."""

    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    tensor_parallel_size: int = 1
    max_model_len: int = 0
    max_num_batched_tokens: int = 2048
    enable_prefix_caching: bool | None = None  # None: vLLM's default
    num_speculative_tokens: int = 0
    speculative_method: str = ""
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    async_scheduling: bool = True
    pipeline_parallel_size: int = 1
    # The attention layers of a drafter with a checkpoint of its own (a draft model, a
    # DFlash drafter) when its config.json is known: vLLM registers them in the same KV cache.
    drafter_layers: tuple[Layer, ...] = ()


@dataclass
class Layout:
    block_size: int
    page_bytes: int  # the (unified) page of one layer
    group_size: int
    groups: list[str]  # the kind of each group
    padding_layers: int
    bytes_per_block: int
    blocks_per_request: int  # at max_model_len
    mamba_mode: str  # "none" or "align"
    ssm_dtype: str = ""
    notes: list[str] = field(default_factory=list)
    first_group_blocks: int = 0  # what 0.14–0.18's fit check counted
    per_group: list = field(default_factory=list)

    def group_blocks(self, index: int, length: int) -> int:
        _kind, block, fixed, window = self.per_group[index]
        if not block:
            return fixed
        tokens = min(window, length) if window else length
        return math.ceil(tokens / block) + fixed

    def blocks_at(self, length: int) -> int:
        """The blocks one request of `length` tokens needs, over every group."""
        return sum(self.group_blocks(i, length) for i in range(len(self.per_group)))

    def request_bytes(self) -> int:
        return self.bytes_per_block * self.blocks_per_request


def kv_bytes(options: CacheOptions, model: TextModel) -> int:
    dtype = options.kv_cache_dtype
    if dtype in ("auto", "", None):
        return DTYPE_BYTES.get(model.dtype, 2)
    if dtype.startswith("fp8") or dtype == "int8":
        return 1
    return DTYPE_BYTES.get(dtype, 2)


def _attn_page(layer: Layer, block_size: int, tp: int, per_token_kv: int) -> int:
    if layer.kind == MLA:
        return block_size * layer.head_dim * per_token_kv
    heads = max(layer.kv_heads // tp, 1)  # replicated when kv_heads < tp
    return block_size * heads * (layer.head_dim + layer.head_dim_v) * per_token_kv


def ssm_dtypes(model: TextModel, options: CacheOptions, rules: Rules) -> tuple[str, str]:
    """(conv state dtype, temporal state dtype) — `mamba_utils.py::mamba2_state_dtype` and
    the model-config hooks (Qwen3.5 reads its config's mamba_ssm_dtype; NemotronH defaults
    to float32)."""
    conv = model.dtype if options.mamba_cache_dtype in ("auto", "") else options.mamba_cache_dtype
    ssm = options.mamba_ssm_cache_dtype
    if ssm in ("auto", ""):
        if model.model_type.startswith("qwen3_5") and model.config_ssm_dtype:
            ssm = model.config_ssm_dtype
        elif model.model_type == "nemotron_h":
            ssm = "float32"
        else:
            ssm = conv
    return conv, ssm


def layout(model: TextModel, options: CacheOptions, rules: Rules) -> Layout:
    tp = max(options.tensor_parallel_size, 1)
    per_token = kv_bytes(options, model)
    notes: list[str] = []
    layers = list(model.layers)
    family = speculative.method_family(options.speculative_method)
    # Draft layers join the target's attention bucket (`is_draft` does not compare): the
    # model's MTP layers, or an EAGLE head's one decoder layer, shaped as the target's.
    drafts = 0
    if options.speculative_method and family == speculative.MTP:
        drafts = model.mtp_layers
    elif options.speculative_method and family == speculative.EAGLE:
        drafts = 1
    if drafts:
        target = next((layer for layer in layers if layer.kind in (FULL, MLA)), None)
        if target is not None:
            layers += [Layer(target.kind, target.kv_heads, target.head_dim, target.head_dim_v,
                             draft=True)] * drafts  # fmt: skip
    elif options.speculative_method and family in (speculative.DRAFT_MODEL, speculative.DFLASH):
        # A draft model's (or DFlash drafter's) attention layers hold KV for every sequence
        # too (the drafter's layers are in vLLM's forward context like the target's); a
        # layer joins the bucket of its kind, counted at that bucket's page (the usual draft
        # shares the target's KV heads and head size: Qwen3-0.6B for Qwen3-32B, DFlash heads).
        layers += [dataclasses.replace(layer, draft=True) for layer in options.drafter_layers
                   if layer.kind in (FULL, SLIDING, MLA)]  # fmt: skip
    ns = options.num_speculative_tokens
    hybrid = model.is_hybrid
    prefix = options.enable_prefix_caching
    if prefix is None:
        prefix = rules.prefix_caching_default(hybrid)
    mamba_mode = rules.mamba_mode(model, prefix) if hybrid else "none"
    block_size = options.block_size or DEFAULT_BLOCK_SIZE
    conv_dtype, ssm_dtype = ssm_dtypes(model, options, rules)
    state_page = 0
    if hybrid:
        shapes = model.state_shapes(tp, ns)
        if shapes is None:  # a hybrid without the sizes of its state layers
            raise ValueError("config.json names state layers but not their sizes")
        state_page = shapes.conv_rows * shapes.conv_width * DTYPE_BYTES.get(
            conv_dtype, 2
        ) + shapes.temporal * DTYPE_BYTES.get(ssm_dtype, 4)
        attn = next(layer for layer in layers if layer.kind in (FULL, SLIDING, MLA))
        per_token_page = _attn_page(attn, 1, tp, per_token)
        align = max(block_size, rules.kernel_block_alignment)
        if attn.kind == MLA:
            align = max(align, MLA_HYBRID_MIN_BLOCK)
        raised = align * math.ceil(state_page / (align * per_token_page))
        if raised > block_size:
            block_size = raised
            notes.append(f"Setting attention block size to {block_size} tokens to ensure that "
                         "attention page size is >= mamba page size.")  # fmt: skip
    pages: dict[str, int] = {}
    for layer in layers:
        if layer.kind in (MAMBA2, GDN):
            continue
        pages.setdefault(layer.kind, _attn_page(layer, block_size, tp, per_token))
    max_page = max([*pages.values(), state_page]) if pages else state_page
    # Buckets by spec: attention kinds (smaller pages block-scaled to the max), states.
    buckets: dict[str, int] = {}
    for layer in layers:
        buckets[layer.kind] = buckets.get(layer.kind, 0) + 1
    sizes = list(buckets.values())
    if len(sizes) == 1:
        group_size, padding = sizes[0], 0
        groups = [next(iter(buckets))]
    else:
        smallest, largest = min(sizes), max(sizes)
        group_size = largest if largest < rules.group_padding_ratio * smallest else smallest
        groups, padding = [], 0
        for kind, count in buckets.items():
            n = math.ceil(count / group_size)
            groups += [kind] * n
            padding += n * group_size - count
        if padding:
            wasted = padding / (len(groups) * group_size) * 100
            notes.append(
                f"Add {padding} padding layers, may waste at most {wasted:.2f}% KV cache memory"
            )
    bytes_per_block = group_size * max_page
    in_flight = options.max_num_batched_tokens * rules.in_flight_factor(
        options.async_scheduling, options.pipeline_parallel_size
    )
    spec_blocks = ns if rules.spec_adds_state_blocks else 0
    # Per group: (kind, block size, fixed blocks, window) — blocks_at() turns a length into
    # the blocks one request of that length needs (kv_cache_interface.py max_memory_usage).
    per_group: list[tuple[str, int, int, int]] = []
    for kind in groups:
        if kind in (MAMBA2, GDN):
            if mamba_mode == "all":  # a state per block, as attention (0.16–0.27)
                per_group.append((kind, block_size, spec_blocks, 0))
            elif mamba_mode == "align":
                ckpt = 1 if kind == MAMBA2 and rules.mamba2_checkpoint_block else 0
                per_group.append((kind, 0, 2 + spec_blocks + ckpt, 0))
            else:
                per_group.append((kind, 0, 1 + spec_blocks, 0))
        elif kind == SLIDING:
            window = next(layer.window for layer in layers if layer.kind == SLIDING)
            # Block-scaled to the largest page: the sliding group's block size grows too.
            sw_block = block_size * (max_page // pages[SLIDING]) if pages[SLIDING] else block_size
            per_group.append((kind, sw_block, 1, window - 1 + in_flight))
        else:
            page = pages.get(kind, max_page)
            per_group.append((kind, block_size * (max_page // page) if page else block_size, 0, 0))
    lay = Layout(
        block_size=block_size, page_bytes=max_page, group_size=group_size, groups=groups,
        padding_layers=padding, bytes_per_block=bytes_per_block, blocks_per_request=0,
        mamba_mode=mamba_mode, ssm_dtype=ssm_dtype, notes=notes, per_group=per_group,
    )  # fmt: skip
    lay.blocks_per_request = lay.blocks_at(options.max_model_len)
    lay.first_group_blocks = lay.group_blocks(0, options.max_model_len) if groups else 0
    return lay


@dataclass(frozen=True)
class Capacity:
    num_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    error: str | None
    estimated_max_len: int = 0


def capacity(lay: Layout, available: int, max_model_len: int, rules: Rules) -> Capacity:
    """The blocks that fit, vLLM's fit check (`kv_cache_planning.py::_check_enough_kv_cache
    _memory`, one null block held back) and its capacity line."""
    check = available - (lay.bytes_per_block if rules.holds_null_block else 0)
    if check <= 0 or available < lay.bytes_per_block:
        return Capacity(0, 0, 0.0, NO_MEMORY)
    needed = lay.request_bytes()
    if rules.fit_counts == "first group":  # 0.14–0.18 counted the first group only
        needed = lay.bytes_per_block * lay.first_group_blocks
    if needed > check:
        # vLLM's binary search for the longest length whose request fits
        # (kv_cache_planning.py::_estimate_max_model_len_from_groups).
        low, high = 0, max_model_len
        while low < high:
            mid = (low + high + 1) // 2
            if lay.bytes_per_block * lay.blocks_at(mid) <= check:
                low = mid
            else:
                high = mid - 1
        estimate = low
        estimate_text = (
            f"Based on the available memory, the estimated maximum model length is {estimate}. "
            if estimate > 0 else ""
        )  # fmt: skip
        return Capacity(0, 0, 0.0, TOO_SMALL.format(
            L=max_model_len, need=needed / GIB, have=check / GIB, estimate=estimate_text,
        ), estimate)  # fmt: skip
    num_blocks = available // lay.bytes_per_block
    concurrency = num_blocks / lay.blocks_per_request
    tokens = rules.kv_tokens(num_blocks, concurrency, max_model_len, lay)
    return Capacity(num_blocks, tokens, concurrency, None)


NO_MEMORY = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine."
)
TOO_SMALL = (
    "To serve at least one request with the model's max seq len ({L}), ({need:.2f} GiB KV cache "
    "is needed, which is larger than the available KV cache memory ({have:.2f} GiB). "
    "{estimate}Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
    "initializing the engine."
)

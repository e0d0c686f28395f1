"""vLLM's own start-up refusals, in the words of the version sparksim imitates.

Every sentence here comes from that version's contract (`vllm_adapter/contracts/`, the
`log_formats` that `tools/vllm_contract.py` read out of vLLM's source): this module only
fills the placeholders, with numbers formatted as vLLM formats them. A version whose
source lost or reworded a message changes what sparksim prints when its contract is
regenerated, and the contract test says so.

Where each message comes from in vLLM 0.33 (and the order vLLM meets them in):

1. `free_memory` — `vllm/v1/worker/utils.py` (`request_memory`, when the worker initialises
   its device, before any weight is loaded): utilization × total > free memory.
2. `load_oom` — `vllm/v1/worker/gpu_model_runner.py` (`load_model`): the weights meet
   `torch.OutOfMemoryError`; vLLM logs this line with the original error and re-raises.
3. `no_cache_memory` — `vllm/v1/core/kv_cache_planning.py`: nothing of the pool is left
   for the KV cache after the profiling run.
4. `kv_too_small` — the same check: one request at max_model_len needs more KV cache than
   there is (with the estimated maximum model length).

Then EngineCore logs `EngineCore failed to start.` (`engine_failed`, with the traceback) and
the API server dies with `RuntimeError: Engine core initialization failed. ...`.
"""

from __future__ import annotations

import math

from vllm_adapter import contract as vllm_contract

GIB = 2**30
# What torch calls the only GPU of a Spark (`init_snapshot.device_` in vLLM's message).
DEVICE = "cuda:0"
# The failed EngineCore process as the API server names it (`{'EngineCore_DP0': 1}`).
FAILED_PROCS = "{'EngineCore_DP0': 1}"


class MissingMessage(LookupError):
    """The imitated version's contract has no such message (regenerate the contracts)."""


def format_gib(nbytes: float) -> str:
    """vLLM's `vllm.utils.mem_utils.format_gib`: `f"{round(b / GiB_bytes, 2)}"`."""
    return f"{round(nbytes / GIB, 2)}"


def fill(template: str, *values: object) -> str:
    """The template's `{}` placeholders (an f-string's fields) filled in order.

    Not `str.format`: the template is vLLM's text, whose other characters stay as they are.
    """
    parts = template.split("{}")
    if len(parts) != len(values) + 1:
        raise ValueError(f"{template!r} has {len(parts) - 1} placeholders, not {len(values)}")
    out = [parts[0]]
    for value, part in zip(values, parts[1:], strict=True):
        out += [str(value), part]
    return "".join(out)


class VllmErrors:
    """The refusals of one vLLM version (the newest with a contract when None)."""

    def __init__(self, version: str | None = None):
        self.contract = vllm_contract.load(version)
        self.version = self.contract.version

    def template(self, key: str, starts: str = "") -> str:
        """The contract's format for `key` that starts with `starts`.

        A version whose contract lacks it (generated before the needle existed) speaks
        with the nearest newer version that has it, else the newest older one.
        """
        versions = vllm_contract.available_versions()
        here = versions.index(self.version) if self.version in versions else len(versions)
        order = [self.version, *versions[here + 1 :], *reversed(versions[:here])]
        for version in order:
            for entry in vllm_contract.load(version).log_formats.get(key, ()):
                if entry["format"].startswith(starts):
                    return entry["format"]
        raise MissingMessage(f"no vLLM contract has a {key!r} message starting {starts!r}")

    def free_memory(self, *, free: float, total: float, utilization: float) -> str:
        """(1) More memory asked for than the device has free at start-up (bytes)."""
        requested = math.ceil(total * utilization)
        text = self.template("free_memory", "Free memory on device {} ({}/{} GiB) on startup is "
                             "less than desired")  # fmt: skip
        return "ValueError: " + fill(text, DEVICE, format_gib(free), format_gib(total),
                                     utilization, format_gib(requested))  # fmt: skip

    def load_oom(self, original_error: str) -> str:
        """(2) The line vLLM logs when the weights meet CUDA's out-of-memory error."""
        # vLLM's own `combined_msg = f"{msg} (original error: {e})"`
        msg = self.template("load_oom", "Failed to load model")
        return f"{msg} (original error: {original_error})"

    def no_cache_memory(self) -> str:
        """(3) Weights, CUDA context and graphs leave nothing of the pool for KV."""
        return "ValueError: " + self.template("no_cache_memory", "No available memory")

    def kv_too_small(
        self, *, max_model_len: int, needed: float, available: float, estimated: int
    ) -> str:
        """(4) One request at max_model_len needs more KV cache than is available (bytes)."""
        estimate = (
            fill(self.template("kv_too_small", "Based on the available memory"), estimated)
            if estimated > 0
            else ""
        )
        text = self.template("kv_too_small", "To serve at least one request")
        return "ValueError: " + fill(
            text, max_model_len, format_gib(needed), format_gib(available), estimate
        )

    def engine_core_failed(self) -> str:
        """EngineCore's last words (`logger.exception`, before the traceback)."""
        return self.template("engine_failed", "EngineCore failed to start")

    def engine_init_failed(self) -> str:
        """The API server's exception once its EngineCore process has died."""
        text = self.template("engine_failed", "Engine core initialization failed")
        return "RuntimeError: " + fill(text, FAILED_PROCS)

    def world_size(self, tp: int, gpus: int) -> str:
        """TP above the node's GPUs without the Ray backend (vllm/config/parallel.py)."""
        return "ValueError: " + fill(self.template("world_size_gpus", "World size"), tp, gpus)

    def no_placement_group(self, tp: int, specs: list, timeout_s: int) -> str:
        """The placement group never got a GPU per rank (vllm/v1/executor/ray_utils.py)."""
        text = self.template("ray_no_gpus", "Cannot provide a placement group requiring")
        return "ValueError: " + fill(text, tp, specs, timeout_s)

    def rank_died(self) -> str:
        """vLLM's RayWorkerMonitor line (a %-format: the dead ranks' list fills it)."""
        return self.template("ray_rank_died", "RayWorkerProc rank=")

    def engine_dead(self) -> str:
        """The API server's words once a running engine died (a rank's Spark went away)."""
        return "vllm.v1.engine.exceptions.EngineDeadError: " + self.template(
            "engine_dead", "EngineCore encountered an issue"
        )


def torch_size(nbytes: float) -> str:
    """c10's `format_size`, which PyTorch's out-of-memory message uses."""
    n = max(int(nbytes), 0)
    if n <= 1024:
        return f"{n} bytes"
    if n <= 2**20:
        return f"{n / 1024:.2f} KiB"
    if n <= 2**30:
        return f"{n / 2**20:.2f} MiB"
    return f"{n / 2**30:.2f} GiB"


def torch_oom(*, tried: float, total: float, free: float, in_use: float) -> str:
    """PyTorch's CUDA out-of-memory message (c10's CUDACachingAllocator; bytes)."""
    return (
        f"CUDA out of memory. Tried to allocate {torch_size(tried)}. GPU 0 has a total "
        f"capacity of {torch_size(total)} of which {torch_size(free)} is free. Including "
        f"non-PyTorch memory, this process has {torch_size(in_use)} memory in use. Of the "
        f"allocated memory {torch_size(in_use)} is allocated by PyTorch, and 0 bytes is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
        "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )

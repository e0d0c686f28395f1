"""The simulated engine: vLLM's continuous batching on a bandwidth clock.

One asyncio task runs engine steps back to back, as vLLM's engine core does:

1. admit waiting requests while fewer than max_num_seqs run and KV blocks are free;
2. give each running request that is still prefilling a chunk of the step's token
   budget (max_num_batched_tokens minus one token per decoding request);
3. the step lasts  decode time + prefill time, where
     decode time  = (active weight bytes read + every decoding sequence's KV and state)
                    ÷ (273 GB/s × efficiency) + step overhead
     prefill time = the profile's TTFT curve, shared out over the request's chunks
   (plus the one-off JIT delay on the first request after start);
4. at the step's end every decoding request gets one token and a request whose prefill
   finished gets its first token; a request that needs a new 16-token KV block when none
   is free preempts the youngest running request (recompute, as vLLM V1 does).

Step ends are scheduled on the wall clock (simulated seconds ÷ time scale) from the
previous step's *scheduled* end, so lateness never accumulates; the lateness of every
emission is measured, and the engine logs when it cannot keep up.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkdomain.planner import (
    Architecture,
    active_weight_bytes,
    kv_bytes_per_sequence,
    kv_element_bytes,
    weight_bytes,
)
from sparkdomain.planner.link import step_comm_seconds
from sparkdomain.spark import (
    BANDWIDTH_GBS,
    DECODE_BANDWIDTH_SHARE,
    GB,
    GRAPH_STEP_SECONDS,
    MIB,
)
from sparksim.corpus import TextStream, stream_seed
from sparksim.metrics import VllmMetrics
from sparksim.profiles import Profile
from vllm_adapter.speculative import Speculation

log = logging.getLogger("sparksim.engine")

BLOCK_SIZE = 16
SPIN_S = 0.0015  # the last stretch before a step's end is awaited with sleep(0)
LATE_WARNING_S = 0.002
LATE_LOG_EVERY_S = 5.0
LOG_STATS_INTERVAL_S = 10.0  # vLLM's VLLM_LOG_STATS_INTERVAL default


class Clock:
    """Simulated time: wall seconds × time scale, from the engine's start."""

    def __init__(self, time_scale: float = 1.0):
        if time_scale <= 0:
            raise ValueError("time scale must be positive")
        self.scale = time_scale
        self.t0 = time.monotonic()

    def sim(self, wall: float | None = None) -> float:
        return ((time.monotonic() if wall is None else wall) - self.t0) * self.scale

    def wall_delay(self, sim_seconds: float) -> float:
        return sim_seconds / self.scale


@dataclass
class Event:
    kind: str  # "tokens" | "finish"
    token_ids: list[int] = field(default_factory=list)
    reasoning: bool = False
    finish_reason: str | None = None


@dataclass
class SimRequest:
    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    cache_salt: str | None = None
    seed: int | None = None
    reasoning_tokens: int = 0
    # A reply given verbatim (the `/sparksim echo` test hook) instead of corpus text.
    scripted: list[int] | None = None
    # The server's --answers ("prose" or the "markdown" demo) and its served model name,
    # which salts the demo's text: two models asked the same prompt answer differently.
    answers: str = "prose"
    model: str = ""
    # --- engine state ---
    arrival_sim: float = 0.0
    admitted_sim: float | None = None
    first_token_sim: float | None = None
    last_token_sim: float | None = None
    finished_sim: float | None = None
    generated: int = 0
    to_compute: int = 0  # prompt (or recompute) tokens still to prefill
    compute_total: int = 0
    started_prefill: bool = False
    cached_tokens: int = 0
    first_cached_tokens: int = 0
    allocated: int = 0  # tokens whose KV vLLM would have allocated by now (its chunks so far)
    blocks: int = 0
    natural_length: int = 0
    finish_reason: str | None = None
    aborted: bool = False
    preemptions: int = 0

    def __post_init__(self) -> None:
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        seed = (
            self.seed
            if self.seed is not None
            else int.from_bytes(
                hashlib.blake2b(repr(self.prompt_ids[:64]).encode(), digest_size=4).digest(), "big"
            )
        )
        self._seed = seed
        self._spec_rng: random.Random | None = None
        self._reasoning = TextStream(stream_seed(seed, "r"), kind="reasoning")
        if self.answers == "markdown":
            text_seed = stream_seed(seed, len(self.prompt_ids), self.model)
            self._text = TextStream(text_seed, kind="markdown")
            # It stops on its own after 3 to 6 whole blocks, so an answer shows several
            # kinds of block and never ends inside a table or a code fence.
            blocks = 3 + stream_seed(text_seed, "blocks") % 4
            self.natural_length = self._text.unit_ends(blocks)[-1]
        else:
            self._text = TextStream(stream_seed(seed, len(self.prompt_ids)))
            # Without ignore_eos a model stops on its own: a deterministic "natural" length.
            self.natural_length = 24 + stream_seed(seed, "len") % 360
        if self.scripted:
            self.natural_length = self.reasoning_tokens + len(self.scripted)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def context_len(self) -> int:
        return self.prompt_len + self.generated

    def spec_rng(self) -> random.Random:
        """This request's draws of accepted drafts: seeded, so a run replays."""
        if self._spec_rng is None:
            self._spec_rng = random.Random(stream_seed(self._seed, "spec"))  # noqa: S311
        return self._spec_rng

    def next_token(self) -> tuple[int, bool]:
        if self.generated < self.reasoning_tokens:
            return self._reasoning.next_ids(1)[0], True
        if self.scripted:
            i = self.generated - self.reasoning_tokens
            return self.scripted[i % len(self.scripted)], False
        return self._text.next_ids(1)[0], False


@dataclass
class TimingStats:
    """Lateness of step ends (actual − scheduled), in wall seconds."""

    samples: collections.deque = field(default_factory=lambda: collections.deque(maxlen=200_000))
    steps: int = 0
    tokens: int = 0

    def add(self, late: float) -> None:
        self.samples.append(late)
        self.steps += 1

    def summary(self) -> dict:
        values = sorted(self.samples)
        if not values:
            return {"steps": 0, "tokens": self.tokens}

        def pct(p: float) -> float:
            return values[min(len(values) - 1, int(p / 100 * len(values)))]

        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "late_p50_ms": pct(50) * 1000,
            "late_p99_ms": pct(99) * 1000,
            "late_max_ms": values[-1] * 1000,
        }

    def reset(self) -> None:
        self.samples.clear()
        self.steps = 0
        self.tokens = 0


class SpecDecodingLog:
    """vLLM's periodic "SpecDecoding metrics" line (vllm/v1/spec_decode/metrics.py
    SpecDecodingLogging), every LOG_STATS_INTERVAL_S of simulated time with drafts in it."""

    def __init__(self, spec: Speculation):
        self.k = spec.num_tokens
        self.since = 0.0
        self.reset(0.0)

    def reset(self, now: float) -> None:
        self.since = now
        self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos = [0] * self.k

    def observe(self, drafted: int, accepted: int) -> None:
        self.drafts += 1
        self.draft_tokens += drafted
        self.accepted += accepted
        for i in range(accepted):
            self.per_pos[i] += 1

    def maybe_log(self, now: float) -> None:
        elapsed = now - self.since
        if elapsed < LOG_STATS_INTERVAL_S:
            return
        if self.drafts:
            rates = ", ".join(f"{n / self.drafts:.3f}" for n in self.per_pos)
            log.info(
                "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: "
                "%.2f tokens/s, Drafted throughput: %.2f tokens/s, Accepted: %d tokens, "
                "Drafted: %d tokens, Per-position acceptance rate: %s, Avg Draft acceptance "
                "rate: %.1f%%",
                1 + self.accepted / self.drafts, self.accepted / elapsed,
                self.draft_tokens / elapsed, self.accepted, self.draft_tokens, rates,
                self.accepted / self.draft_tokens * 100,
            )  # fmt: skip
        self.reset(now)


class Engine:
    def __init__(
        self,
        *,
        profile: Profile,
        architecture: Architecture,
        metrics: VllmMetrics,
        clock: Clock,
        max_model_len: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        num_blocks: int,
        kv_cache_dtype: str = "auto",
        blocks_at: Callable[[int], int] | None = None,
        enable_prefix_caching: bool = True,
        enforce_eager: bool = False,
        tensor_parallel_size: int = 1,
        hang_after_tokens: int | None = None,
        speculation: Speculation | None = None,
    ):
        self.profile = profile
        self.spec = speculation
        self._spec_log = SpecDecodingLog(speculation) if speculation else None
        self.tp = max(tensor_parallel_size, 1)
        self.arch = architecture
        self.metrics = metrics
        self.clock = clock
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max(max_num_batched_tokens, max_num_seqs + 1)
        self.num_blocks = num_blocks
        self.free_blocks = num_blocks
        # Blocks a request of n tokens holds (vLLM's KV cache layout; 16-token blocks when
        # the start-up did not predict one).
        self._blocks_at = blocks_at or (lambda tokens: math.ceil(tokens / BLOCK_SIZE))
        self.enable_prefix_caching = enable_prefix_caching
        self.element = kv_element_bytes(architecture, kv_cache_dtype)
        self.enforce_eager = enforce_eager
        self.waiting: collections.deque[SimRequest] = collections.deque()
        self.running: list[SimRequest] = []
        self.prefix_cache: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self.jit_pending = True
        self.timing = TimingStats()
        self._wake = asyncio.Event()
        self._next_wall: float | None = None
        # The `hang` fault: after this many generated tokens the loop stops stepping for
        # good; requests stay running, the HTTP server (/health, /metrics) lives on.
        self.hang_after_tokens = hang_after_tokens
        self.generated_total = 0
        self.hung = False
        self._last_late_log = 0.0

    # --- public ---------------------------------------------------------------------
    def submit(self, request: SimRequest) -> None:
        request.arrival_sim = self.clock.sim()
        self.waiting.append(request)
        self._publish_queue()
        self._wake.set()

    def abort(self, request: SimRequest) -> None:
        """The client went away: free its blocks now (vLLM aborts on disconnect)."""
        if request.finish_reason is not None or request.aborted:
            return
        request.aborted = True
        if self.hung:
            return  # a wedged engine never gets to the abort: the request stays running
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self._finish(request, "abort", self.clock.sim())
        self._publish_queue()

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    async def run(self) -> None:
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                self._next_wall = None
                await self._wake.wait()
            self._admit()
            if not self.running:
                # Nothing admissible (should not happen: prompts are checked against
                # capacity on submit); wait for a change rather than spin.
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._step()
            if (
                self.hang_after_tokens is not None
                and self.generated_total >= self.hang_after_tokens
            ):
                log.warning(
                    "fault injection: the engine hangs after %d tokens", self.generated_total
                )
                self.hung = True
                await asyncio.Event().wait()  # never set: stuck, as a wedged engine is

    # --- scheduling -----------------------------------------------------------------
    def _blocks_for(self, tokens: int) -> int:
        return self._blocks_at(tokens)

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            needed = self._blocks_for(request.context_len + 1)
            if needed > self.free_blocks:
                break
            self.waiting.popleft()
            request.blocks = needed
            self.free_blocks -= needed
            if request.admitted_sim is None:
                request.admitted_sim = self.clock.sim()
            cached = self._prefix_lookup(request) if request.generated == 0 else 0
            request.cached_tokens = cached
            if request.preemptions == 0:
                # vLLM records a prompt's cache hits at its first scheduling only.
                request.first_cached_tokens = cached
            request.to_compute = request.context_len - cached
            request.allocated = cached
            request.compute_total = request.to_compute
            request.started_prefill = False
            self.running.append(request)
        self._publish_queue()

    def _block_hashes(self, request: SimRequest) -> list[bytes]:
        hashes, parent = [], (request.cache_salt or "").encode()
        full = request.prompt_len // BLOCK_SIZE
        for i in range(full):
            chunk = request.prompt_ids[i * BLOCK_SIZE : (i + 1) * BLOCK_SIZE]
            parent = hashlib.blake2b(parent + repr(chunk).encode(), digest_size=16).digest()
            hashes.append(parent)
        return hashes

    def _prefix_lookup(self, request: SimRequest) -> int:
        if not self.enable_prefix_caching:
            return 0
        hits = 0
        for block_hash in self._block_hashes(request):
            if block_hash not in self.prefix_cache:
                break
            self.prefix_cache.move_to_end(block_hash)
            hits += 1
        # At least the last token is always computed (it produces the first output).
        cached = min(hits * BLOCK_SIZE, request.prompt_len - 1)
        self.metrics.add_prefix_cache(queries=request.prompt_len, hits=cached)
        return cached

    def _prefix_store(self, request: SimRequest) -> None:
        if not self.enable_prefix_caching:
            return
        for block_hash in self._block_hashes(request):
            self.prefix_cache[block_hash] = None
            self.prefix_cache.move_to_end(block_hash)
        while len(self.prefix_cache) > self.num_blocks:
            self.prefix_cache.popitem(last=False)

    # --- one step ---------------------------------------------------------------------
    def _decode_seconds(self, decoding: list[SimRequest]) -> float:
        return decode_step_seconds(
            self.profile, self.arch, self.element, [r.context_len for r in decoding],
            enforce_eager=self.enforce_eager, tp=self.tp, spec=self.spec,
        )  # fmt: skip

    def _plan_step(self) -> tuple[float, list[SimRequest], list[tuple[SimRequest, int]]]:
        decoding = [r for r in self.running if r.to_compute == 0]
        budget = self.max_num_batched_tokens - len(decoding)
        chunks: list[tuple[SimRequest, int]] = []
        seconds = self._decode_seconds(decoding)
        for request in self.running:
            if request.to_compute == 0 or budget <= 0:
                continue
            take = min(request.to_compute, budget)
            budget -= take
            chunks.append((request, take))
            total = max(request.compute_total, 1)
            # Tensor parallel: each rank computes its share, then the chunk's activations
            # are all-reduced over the link (sparkdomain/planner/link.py).
            seconds += self.profile.prefill_seconds(total) * take / total / self.tp
            seconds += step_comm_seconds(self.arch, take, tp=self.tp)
            if not request.started_prefill:
                seconds += self.profile.fixed_prefill_seconds
                if self.jit_pending:
                    seconds += self.profile.jit_seconds
                    self.jit_pending = False
        return seconds, decoding, chunks

    async def _step(self) -> None:
        seconds, decoding, chunks = self._plan_step()
        for request, take in chunks:
            request.allocated = request.context_len - request.to_compute + take
        self._publish_queue()  # the scheduler's state: this step's chunks allocated
        now = time.monotonic()
        start = (
            self._next_wall if self._next_wall is not None and self._next_wall > now - 0.05 else now
        )
        target = start + self.clock.wall_delay(seconds)
        self._next_wall = target
        await _sleep_until(target)
        late = time.monotonic() - target
        self.timing.add(late)
        if late > LATE_WARNING_S:
            self._warn_late(late)
        end_sim = self.clock.sim(target)
        # As vLLM V1 counts a step (vllm/v1/metrics/stats.py, loggers.py): from its outputs
        # only. A chunk that does not finish a prefill emits nothing, so no token counter
        # moves during a prefill; the step that gives a request its first token counts the
        # whole prompt (vllm:prompt_tokens) and the prompt tokens it computed, cache hits
        # left out (vllm:iteration_tokens_total, with the step's generated tokens).
        generated_before, computed = self.generated_total, 0
        for request, take in chunks:
            if request.blocks == 0:  # preempted earlier in this step
                continue
            request.started_prefill = True
            request.to_compute -= take
            if request.to_compute == 0 and request.finish_reason is None and not request.aborted:
                if request.generated == 0:
                    self.metrics.add_prompt_tokens(request.prompt_len)
                    computed += request.prompt_len - request.first_cached_tokens
                    self._prefix_store(request)
                self._emit(request, end_sim)
        for request in decoding:
            if request.finish_reason is None and not request.aborted and request.blocks > 0:
                self._emit(request, end_sim, step_seconds=seconds)
                if self.spec is not None:
                    self._speculate(request, end_sim)
        if self._spec_log is not None:
            self._spec_log.maybe_log(end_sim)
        if self.generated_total > generated_before:
            self.metrics.observe_iteration_tokens(
                computed + self.generated_total - generated_before
            )
        self.running = [r for r in self.running if r.finish_reason is None and not r.aborted]
        self._publish_queue()

    def _emit(self, request: SimRequest, now_sim: float, step_seconds: float | None = None) -> None:
        # A new token may need a new KV block; without one, preempt the youngest request.
        grow = self._blocks_for(request.context_len + 1) - request.blocks
        if grow > 0:
            while self.free_blocks < grow:
                victim = self._preempt_victim(exclude=request)
                if victim is None:
                    break
                self._preempt(victim)
            if self.free_blocks < grow:
                self._preempt(request)
                return
            request.blocks += grow
            self.free_blocks -= grow
        token_id, reasoning = request.next_token()
        request.generated += 1
        self.generated_total += 1
        self.timing.tokens += 1
        if request.first_token_sim is None:
            request.first_token_sim = now_sim
            self.metrics.observe_ttft(now_sim - request.arrival_sim)
        elif step_seconds is not None:
            self.metrics.observe_inter_token(step_seconds)
        request.last_token_sim = now_sim
        self.metrics.add_generation_tokens(1)
        request.events.put_nowait(Event("tokens", [token_id], reasoning=reasoning))
        reason = None
        if request.generated >= request.max_tokens:
            reason = "length"
        elif not request.ignore_eos and request.generated >= max(
            request.min_tokens, request.natural_length
        ):
            reason = "stop"
        if reason:
            self._finish(request, reason, now_sim)

    def _speculate(self, request: SimRequest, now_sim: float) -> None:
        """The drafts a verified step accepted for `request`: position i is accepted with
        its conditional rate if every position before it was (sparkdomain/speculative.py);
        each accepted token is emitted in this step after the target's own, and the step
        is counted as vLLM's scheduler counts a draft (SpecDecodingStats.observe_draft)."""
        spec = self.spec
        accepted = 0
        for rate in spec.conditional:
            if request.spec_rng().random() >= rate:
                break
            accepted += 1
        self.metrics.observe_draft(spec.num_tokens, accepted)
        self._spec_log.observe(spec.num_tokens, accepted)
        for _ in range(accepted):
            if request.finish_reason is not None or request.aborted or request.blocks == 0:
                break
            # No inter-token latency for these: vLLM observes one per request and step.
            self._emit(request, now_sim)

    def _preempt_victim(self, exclude: SimRequest) -> SimRequest | None:
        candidates = [r for r in self.running if r is not exclude and r.blocks > 0]
        return max(candidates, key=lambda r: r.arrival_sim) if candidates else None

    def _preempt(self, request: SimRequest) -> None:
        self.free_blocks += request.blocks
        request.blocks = 0
        request.preemptions += 1
        if request in self.running:
            self.running.remove(request)
        self.waiting.appendleft(request)
        self.metrics.add_preemptions(1)
        log.info("preempted request %s (KV cache full)", request.request_id)

    def _finish(self, request: SimRequest, reason: str, now_sim: float) -> None:
        request.finish_reason = reason
        request.finished_sim = now_sim
        self.free_blocks += request.blocks
        request.blocks = 0
        if request in self.running:
            self.running.remove(request)
        admitted = request.admitted_sim if request.admitted_sim is not None else now_sim
        first = request.first_token_sim if request.first_token_sim is not None else now_sim
        self.metrics.observe_finished(
            finished_reason=reason,
            prompt_tokens=request.prompt_len,
            generation_tokens=request.generated,
            queue_s=max(admitted - request.arrival_sim, 0.0),
            prefill_s=max(first - admitted, 0.0),
            decode_s=max(now_sim - first, 0.0),
            ttft_s=max(first - request.arrival_sim, 0.0),
            e2e_s=max(now_sim - request.arrival_sim, 0.0),
        )
        request.events.put_nowait(Event("finish", finish_reason=reason))
        self._wake.set()

    def _publish_queue(self) -> None:
        self.metrics.set_queue(running=len(self.running), waiting=len(self.waiting))
        # The engine holds a prompt's blocks from its admission; vLLM allocates them chunk by
        # chunk as its prefill is scheduled (vllm/v1/core/sched/scheduler.py allocate_slots),
        # so its KV usage grows step by step through a long prefill: blocks a prompt's
        # scheduled chunks have not reached are not shown as used.
        unreached = sum(
            r.blocks - min(r.blocks, self._blocks_for(r.allocated))
            for r in self.running
            if r.to_compute
        )
        used = self.num_blocks - self.free_blocks - unreached
        self.metrics.set_kv_usage(used / self.num_blocks if self.num_blocks else 0.0)

    def _warn_late(self, late: float) -> None:
        now = time.monotonic()
        if now - self._last_late_log < LATE_LOG_EVERY_S:
            return
        self._last_late_log = now
        stats = self.timing.summary()
        log.warning(
            "sparksim cannot keep up: a step ended %.1f ms late (p99 %.1f ms over %d steps, "
            "%d running); emitted timings are distorted by that much",
            late * 1000, stats.get("late_p99_ms", 0.0), stats["steps"], len(self.running),
        )  # fmt: skip


def decode_step_seconds(
    profile: Profile,
    arch: Architecture,
    element_bytes: int,
    context_lens: list[int],
    *,
    enforce_eager: bool = False,
    tp: int = 1,
    spec: Speculation | None = None,
) -> float:
    """Simulated seconds of one decode step for sequences at these context lengths: the
    active weights once (more for a batch of a MoE model, up to the whole checkpoint) plus
    each sequence's KV and recurrent state, at the profile's share of 273 GB/s, plus the
    per-step overhead (2.5× without CUDA graphs: kernel launches from Python). With tensor
    parallel `tp` each Spark reads its 1/tp share in parallel, then the step pays the
    all-reduces of one token per sequence over the link (sparkdomain/planner/link.py).
    With speculative decoding `spec` the step verifies 1 + k tokens a sequence and runs
    the drafter (sparksim/decode.py)."""
    if not context_lens:
        return 0.0
    n = len(context_lens)
    if profile.reads is not None:  # the checkpoint's own reads (sparksim/decode.py)
        return checkpoint_step_seconds(profile, arch, element_bytes, context_lens,
                                       enforce_eager=enforce_eager, tp=tp, spec=spec)  # fmt: skip
    tokens = n * (1 + spec.num_tokens) if spec else n
    active = active_weight_bytes(arch) or 0.0
    weights = min(
        active * (1 + profile.moe_batch_growth * (tokens - 1)),
        max(weight_bytes(arch) or active, active),
    )
    if spec and spec.draft_passes:
        # Estimated without a checkpoint: a drafter pass reads about one layer's share of
        # the active weights twice over (its layer and the output head).
        weights += spec.draft_passes * 2 * active / max(arch.num_layers or 1, 1)
    state = (arch.recurrent_state_mib or 0.0) * MIB
    kv = sum(
        (kv_bytes_per_sequence(arch, element_bytes, length) or 0.0) + state
        for length in context_lens
    )
    passes = 1 + (spec.draft_passes if spec else 0)
    overhead = profile.step_overhead_s * (2.5 if enforce_eager else 1.0) * passes
    read = (weights + kv) / tp / (BANDWIDTH_GBS * GB * profile.decode_efficiency)
    return read + overhead + step_comm_seconds(arch, tokens, tp=tp)


# The GB10's measured share of its bandwidth (DECODE_BANDWIDTH_SHARE) and the fixed cost of a
# step with CUDA graphs (GRAPH_STEP_SECONDS) are the domain's (sparkdomain/spark.py, where
# their sources are), so the planner's capacity prediction and this engine decode alike.
# Without CUDA graphs every layer's kernels are launched from Python: 0.74 ms a layer (the
# vLLM blog's Nemotron-3-Super, eager against graphs; the same note in spark.py).
EAGER_LAYER_OVERHEAD_S = 0.00074


def checkpoint_step_seconds(profile: Profile, arch: Architecture, element_bytes: int,
                            context_lens: list[int], *, enforce_eager: bool = False,
                            tp: int = 1, spec: Speculation | None = None) -> float:  # fmt: skip
    """One decode step from the checkpoint's reads: the weights its tokens touch, each
    sequence's KV and recurrent state, at the GB10's measured share of its bandwidth, plus
    the step's fixed cost and, over a pair, the all-reduces. With speculative decoding the
    target pass verifies n·(1 + k) tokens (each sequence's KV is read once for all of
    them) and the drafter runs its passes over the n sequences, each a fixed cost of its
    own."""
    n = len(context_lens)
    reads = profile.reads
    tokens = n * (1 + spec.num_tokens) if spec else n
    weights = reads.weights(tokens)
    passes = spec.draft_passes if spec else 0
    if passes and reads.draft is not None:
        weights += passes * reads.draft.weights(n)
    state = (arch.recurrent_state_mib or 0.0) * MIB
    kv = (
        sum(
            (kv_bytes_per_sequence(arch, element_bytes, length) or 0.0) + state
            for length in context_lens
        )
        / tp
    )
    overhead = GRAPH_STEP_SECONDS * (1 + passes)
    if enforce_eager:
        overhead += EAGER_LAYER_OVERHEAD_S * (max(arch.num_layers or 1, 1) + passes)
    read = (weights + kv) / (BANDWIDTH_GBS * GB * DECODE_BANDWIDTH_SHARE)
    return read + overhead + step_comm_seconds(arch, tokens, tp=tp)


async def _sleep_until(target: float) -> None:
    """Sleep to a wall-clock deadline with sub-millisecond accuracy: a coarse sleep, then
    yielding to the loop (so streams keep flowing) until the deadline."""
    delay = target - time.monotonic() - SPIN_S
    if delay > 0:
        await asyncio.sleep(delay)
    while time.monotonic() < target:
        await asyncio.sleep(0)

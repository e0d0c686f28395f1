"""What a level is and what it gives back: `Scenario`, `LevelSpec` and `SLO` in;
`RequestResult` (one request) and `LevelResult` (one level; its `to_dict()` is what the
benchmark app stores) out. Also the bounds a level must stay within (`level_refusal` and
the MAX_* numbers the suite forms validate against)."""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, fields

from apps.benchmarks.harness.arrivals import Arrivals
from apps.benchmarks.harness.datasets import MAX_PROMPT as DATASET_MAX_PROMPT
from apps.benchmarks.harness.datasets import MAX_TOTAL as DATASET_MAX_TOTAL
from apps.benchmarks.harness.datasets import Dataset
from vllm_adapter import endpoints

# Bounds on what a level may build, whatever a suite says (suites are validated against
# them, and against the recipe's max_model_len, before a job is queued): no context vLLM
# serves on a Spark holds more than a million tokens, and the prompts a level keeps ready
# (one per request unless the prefix is warm) stay around a hundred MB.
MAX_PROMPT_TOKENS = 1_000_000
MAX_OUTPUT_TOKENS = 100_000
MAX_LEVEL_PROMPT_TOKENS = 16_000_000
MAX_PREFIX_GROUPS = 64
# A level keeps its requests' chunk gaps (for the `vllm bench serve` export) up to this many
# in all, about 2 MB of JSON; a larger level keeps its statistics and per-request rows only.
MAX_STORED_GAPS = 250_000
# A request's own part after a shared prefix: its opening (the salt) and the chat template.
PREFIX_ROOM_TOKENS = 48
ERROR_TEXT_MAX = endpoints.ERROR_TEXT_MAX
# The endpoint a level's requests go to: /v1/chat/completions (chat-templated messages) or
# /v1/completions (a plain text prompt).
CHAT, COMPLETIONS = "chat", "completions"
ENDPOINTS = (CHAT, COMPLETIONS)


@dataclass
class Scenario:
    name: str
    prompt_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError("a scenario needs at least one prompt and one output token")


@dataclass(frozen=True)
class SharedPrefix:
    """`groups` system prompts of about `tokens` tokens each; request i opens with group
    i mod groups' (a team's few long system prompts or agent instructions)."""

    groups: int
    tokens: int

    def __post_init__(self) -> None:
        if not 1 <= self.groups <= MAX_PREFIX_GROUPS:
            raise ValueError(f"a shared prefix has 1 to {MAX_PREFIX_GROUPS} groups")
        if not 16 <= self.tokens <= MAX_PROMPT_TOKENS:
            raise ValueError("a shared prefix has at least 16 tokens")


LENGTH_KINDS = ("uniform", "normal")


@dataclass(frozen=True)
class Lengths:
    """Requests of varied lengths around the scenario's: `uniform` draws each prompt and
    answer length from ±`spread` of the scenario's (e.g. 0.5: 50 %–150 %), `normal` from a
    normal distribution with standard deviation `spread` × the scenario's, kept within
    ±2 standard deviations (and at least one token). Seeded: the same seed, the same
    lengths."""

    kind: str
    spread: float
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise ValueError(f"lengths are uniform or normal, not {self.kind!r}")
        if not 0 < self.spread <= (1 if self.kind == "uniform" else 0.5):
            raise ValueError(
                "the spread is above 0 and at most 1 (uniform) or 0.5 (normal) of the length"
            )

    def reach(self) -> float:
        """How far from the scenario's length a draw may go, as a fraction of it."""
        return self.spread if self.kind == "uniform" else 2 * self.spread

    def draw(self, mean: int, rng: random.Random) -> int:
        low, high = max(1, round(mean * (1 - self.reach()))), round(mean * (1 + self.reach()))
        if self.kind == "uniform":
            return rng.randint(low, max(low, high))
        return min(max(round(rng.gauss(mean, self.spread * mean)), low), max(low, high))


MAX_TURNS = 32
MAX_THINK_S = 600.0
# A later turn's prompt: the conversation so far plus a question; the chat template adds
# a few tokens around each message (counted by the server, not predicted here).
TEMPLATE_ROOM_TOKENS = 16


@dataclass(frozen=True)
class Sessions:
    """`turns` questions per session, `think_s` (simulated) seconds between an answer and
    the next question, each later question `question_tokens` long."""

    turns: int
    think_s: float = 0.0
    question_tokens: int = 64

    def __post_init__(self) -> None:
        if not 2 <= self.turns <= MAX_TURNS:
            raise ValueError(f"a session has 2 to {MAX_TURNS} turns")
        if not 0 <= self.think_s <= MAX_THINK_S:
            raise ValueError(f"the think time is 0 to {MAX_THINK_S:g} s")
        if not 4 <= self.question_tokens <= 100_000:
            raise ValueError("a follow-up question has 4 to 100,000 tokens")

    def sessions_for(self, requests: int) -> int:
        """Whole sessions covering at least `requests` measured requests."""
        return max(1, math.ceil(requests / self.turns))

    def longest_prompt(self, first: int, answer: int) -> int:
        """The last turn's prompt, about: every question and answer before it."""
        later = self.turns - 1
        return first + later * (answer + self.question_tokens + 2 * TEMPLATE_ROOM_TOKENS)

    def describe(self, first: int, answer: int) -> str:
        think = f", {self.think_s:g} s think time" if self.think_s else ""
        return (
            f"chat sessions of {self.turns} turns ({first}-token opening, "
            f"{self.question_tokens}-token follow-ups, {answer}-token answers{think})"
        )


def request_lengths(spec: LevelSpec, total: int) -> list[tuple[int, int]]:
    """(prompt, answer) tokens of each of a level's `total` requests, warm-up included."""
    scenario = spec.scenario
    if spec.lengths is None:
        return [(scenario.prompt_tokens, scenario.output_tokens)] * total
    rng = random.Random(spec.lengths.seed)  # noqa: S311 — repeatable lengths, not secrets
    return [
        (spec.lengths.draw(scenario.prompt_tokens, rng),
         spec.lengths.draw(scenario.output_tokens, rng))
        for _ in range(total)
    ]  # fmt: skip


@dataclass
class LevelSpec:
    """One level. Closed loop: `concurrency` streams, each sending its next request when
    its answer ends. Open loop (`arrivals` set): the measured requests are sent at the
    arrivals' times whatever the answers do (at most `arrivals.max_concurrency` in flight);
    `concurrency` is then the warm-up's streams. `warmup` is raised to `concurrency` when
    lower."""

    scenario: Scenario
    concurrency: int
    requests: int
    warmup: int
    warm_prefix: bool = False
    arrivals: Arrivals | None = None
    endpoint: str = CHAT
    shared_prefix: SharedPrefix | None = None
    lengths: Lengths | None = None
    dataset: Dataset | None = None  # requests from a dataset: its prompts and lengths
    # multi-turn chat sessions (sessions.py): `concurrency` people, `requests` rounded up to
    # whole sessions
    sessions: Sessions | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.requests < 1:
            raise ValueError("concurrency and requests must be at least 1")
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"a level's endpoint is chat or completions, not {self.endpoint!r}")
        self.warmup = max(int(self.warmup), self.concurrency)
        if self.sessions is not None:
            self.requests = self.sessions.sessions_for(self.requests) * self.sessions.turns


@dataclass
class SLO:
    """Goodput bounds, in (simulated) seconds."""

    ttft_s: float
    tpot_s: float


@dataclass
class RequestResult:
    """One request. `*_at` are raw `time.monotonic()` wall times; durations are seconds
    × time_scale; `chunk_times`/`chunk_tokens` are the raw receive times and token counts
    of the token-bearing chunks (kept for ground-truth checks, left out of `to_dict`)."""

    index: int
    warmup: bool
    intended_prompt_tokens: int
    intended_output_tokens: int
    ok: bool = False
    error_kind: str | None = None
    error: str | None = None
    status: int | None = None
    response_id: str | None = None
    scheduled_at: float | None = None  # open loop: when the arrivals said it was due
    ready_at: float | None = None
    sent_at: float | None = None
    first_byte_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    end_at: float | None = None
    schedule_lag_ms: float | None = None
    ttft: float | None = None
    e2e: float | None = None
    tpot: float | None = None
    decode_tok_s: float | None = None
    prefill_tok_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    prompt_mismatch: bool = False
    output_mismatch: bool = False
    itl: list[float] = field(default_factory=list)
    turn: int | None = None  # a multi-turn session's turn (1, 2, …)
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    answer: str | None = None  # a session's answer text (sent back in the next turn)

    def fail(self, kind: str, message: str) -> None:
        if self.error_kind is None:  # the first failure is the cause
            self.ok = False
            self.error_kind, self.error = kind, message[:ERROR_TEXT_MAX]

    def compact(
        self, origin: float | None = None, time_scale: float = 1.0, gaps: bool = True
    ) -> dict:
        """The stored row. `start`: when it was sent, seconds after `origin` (the level's
        first send); `lag`: how late an open-loop send went after it was due (None in a
        closed loop, where a stream sends as soon as its answer ends); `gaps`: the time
        between its token-bearing chunks (vLLM's `itls`: one per chunk after the first),
        all in host seconds; left empty when `gaps` is
        False (a level too large to keep them: MAX_STORED_GAPS)."""
        return {
            "ttft": _round(self.ttft),
            "e2e": _round(self.e2e),
            "tpot": _round(self.tpot),
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "ok": self.ok,
            "error": None if self.ok else f"{self.error_kind}: {self.error}",
            "turn": self.turn,
            "start": None
            if origin is None or self.sent_at is None
            else _round((self.sent_at - origin) * time_scale),
            "lag": None
            if self.schedule_lag_ms is None
            else _round(max(self.schedule_lag_ms, 0) / 1000 * time_scale),
            "gaps": [
                _round((b - a) * time_scale)
                for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)
            ]
            if self.ok and gaps
            else [],
        }

    def to_dict(self) -> dict:
        out = asdict(self)
        for kept_out in ("chunk_times", "chunk_tokens", "answer"):
            out.pop(kept_out)
        return out


@dataclass
class LevelResult:
    spec: LevelSpec
    slo: SLO | None
    time_scale: float
    started: float  # wall-clock time.time() of the start
    error: str | None = None  # the level could not run at all (e.g. prompts not buildable)
    stopped: bool = False  # should_stop() ended it early
    saturated: bool = False  # open loop: ended early, the backlog grew without bound
    arrival: dict = field(default_factory=dict)  # open loop: requested vs achieved rate, lag
    sent: int = 0  # measured requests sent
    ok: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    prompt_mismatches: int = 0
    output_mismatches: int = 0
    window_s: float | None = None
    request_throughput: float | None = None  # ok requests / s
    output_throughput: float | None = None  # output tok/s
    total_throughput: float | None = None  # (prompt + output) tok/s
    ttft: dict = field(default_factory=dict)
    e2e: dict = field(default_factory=dict)
    tpot: dict = field(default_factory=dict)
    itl: dict = field(default_factory=dict)
    decode_tok_s: dict = field(default_factory=dict)
    prefill_tok_s: dict = field(default_factory=dict)
    goodput: float | None = None  # requests / s meeting the SLO
    goodput_fraction: float | None = None  # of the requests sent
    decode_timed: bool = True  # False: too short to time (see decode_too_short)
    diagnostics: dict = field(default_factory=dict)
    server: dict = field(default_factory=dict)
    dataset: dict = field(default_factory=dict)  # a dataset level: what its sample took
    requests: list[dict] = field(default_factory=list)  # compact, one per measured request
    gaps_kept: bool = True  # False: too many chunk gaps to store (MAX_STORED_GAPS)
    details: list[RequestResult] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        """JSON-ready, without `details` (the full per-request records)."""
        out = {}
        for f in fields(self):
            if f.name == "details":
                continue
            value = getattr(self, f.name)
            out[f.name] = asdict(value) if hasattr(value, "__dataclass_fields__") else value
        return out


class PromptLengthError(ValueError):
    """No prompt of exactly the requested chat-templated length could be built."""


def level_refusal(spec: LevelSpec, max_model_len: int | None = None) -> str | None:
    """Why this level must not run (None: it may): a prompt or answer beyond the absolute
    bounds, prompt + answer beyond the served context (vLLM refuses every such request),
    or more prompt tokens than a level keeps in memory."""
    if spec.dataset is not None:
        return _dataset_refusal(spec, max_model_len)
    if spec.sessions is not None:
        return _sessions_refusal(spec, max_model_len)
    scenario = spec.scenario
    prompt, output = scenario.prompt_tokens, scenario.output_tokens
    if spec.lengths is not None:  # judged at the longest and shortest a draw may be
        if spec.warm_prefix:
            return (
                "a warm prefix repeats one whole prompt: it and varied lengths exclude each other."
            )
        reach = spec.lengths.reach()
        shortest = max(1, round(prompt * (1 - reach)))
        prompt, output = round(prompt * (1 + reach)), round(output * (1 + reach))
        shared = spec.shared_prefix
        if shared is not None and shared.tokens + PREFIX_ROOM_TOKENS > shortest:
            return (
                f"a shared prefix of {shared.tokens:,} tokens leaves no room in the shortest "
                f"prompts ({shortest:,} tokens): a shorter prefix or a smaller spread."
            )
    if prompt > MAX_PROMPT_TOKENS:
        return f"{prompt:,} prompt tokens: a prompt has at most {MAX_PROMPT_TOKENS:,}."
    if output > MAX_OUTPUT_TOKENS:
        return f"{output:,} generated tokens: an answer has at most {MAX_OUTPUT_TOKENS:,}."
    if max_model_len is not None and prompt + output > max_model_len:
        return (
            f"{prompt:,} prompt + {output:,} generated tokens is more than the recipe's "
            f"max_model_len ({max_model_len:,}): the server would refuse every request."
        )
    shared = spec.shared_prefix
    if shared is not None and shared.tokens + PREFIX_ROOM_TOKENS > prompt:
        return (
            f"a shared prefix of {shared.tokens:,} tokens leaves no room in a "
            f"{prompt:,}-token prompt (each request needs about {PREFIX_ROOM_TOKENS} of its "
            "own): a shorter prefix or a longer prompt."
        )
    if shared is not None and spec.warm_prefix:
        return "a warm prefix repeats one whole prompt: it and a shared prefix exclude each other."
    held = prompt * (1 if spec.warm_prefix else spec.warmup + spec.requests)
    if held > MAX_LEVEL_PROMPT_TOKENS:
        return (
            f"{spec.warmup + spec.requests:,} requests of {prompt:,} prompt tokens are "
            f"{held:,} prompt tokens to hold; a level holds at most "
            f"{MAX_LEVEL_PROMPT_TOKENS:,} (fewer requests, shorter prompts or a warm prefix)."
        )
    return None


def _dataset_refusal(spec: LevelSpec, max_model_len: int | None) -> str | None:
    """A dataset sets every request's lengths: nothing else may, and its longest request
    (vLLM's filter: DATASET_MAX_TOTAL tokens) must fit the served context."""
    if spec.warm_prefix or spec.shared_prefix is not None or spec.lengths is not None:
        return (
            "ShareGPT requests take their prompts and lengths from the dataset: no warm "
            "prefix, shared prefix or varied lengths with it."
        )
    if max_model_len is not None and max_model_len < DATASET_MAX_TOTAL:
        return (
            f"ShareGPT requests reach {DATASET_MAX_TOTAL:,} tokens (vLLM's filter: prompts up to "
            f"{DATASET_MAX_PROMPT:,}, prompt + answer up to {DATASET_MAX_TOTAL:,}); the "
            f"recipe's max_model_len is {max_model_len:,}."
        )
    return None


def _sessions_refusal(spec: LevelSpec, max_model_len: int | None) -> str | None:
    """Sessions are people chatting: chat only, each turn's answer sent back (no warm or
    shared prefix, no dataset, no varied lengths, no open loop), and the last turn's
    conversation within the served context."""
    if spec.endpoint != CHAT:
        return "multi-turn sessions are chats: the chat endpoint only."
    if (spec.warm_prefix or spec.shared_prefix is not None or spec.lengths is not None
            or spec.arrivals is not None):  # fmt: skip
        return (
            "multi-turn sessions send their own conversation back: no warm or shared prefix, "
            "varied lengths or request rates with them (their people are the concurrency)."
        )
    scenario, sessions = spec.scenario, spec.sessions
    if scenario.prompt_tokens > MAX_PROMPT_TOKENS or scenario.output_tokens > MAX_OUTPUT_TOKENS:
        return "a session's opening or answer is beyond a level's bounds."
    longest = sessions.longest_prompt(scenario.prompt_tokens, scenario.output_tokens)
    if max_model_len is not None and longest + scenario.output_tokens > max_model_len:
        return (
            f"the last of {sessions.turns} turns holds about {longest:,} prompt tokens + "
            f"{scenario.output_tokens:,} generated, more than the recipe's max_model_len "
            f"({max_model_len:,}): fewer turns or shorter answers."
        )
    held = scenario.prompt_tokens * (spec.warmup + spec.requests // sessions.turns)
    if held > MAX_LEVEL_PROMPT_TOKENS or longest > MAX_PROMPT_TOKENS:
        return f"these sessions hold more than a level's {MAX_LEVEL_PROMPT_TOKENS:,} prompt tokens."
    return None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)

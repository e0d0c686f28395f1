"""Exact-length prompts and the request bodies a level sends: `build_messages` finds chat
messages whose chat-templated length (the server's own POST /tokenize) is exactly the
scenario's, from a unique salt and filler words; `build_payloads` serialises one body per
request (one for all with a warm prefix) before anything is sent."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import random
import uuid
from collections.abc import Sequence

from apps.benchmarks.harness import datasets
from apps.benchmarks.harness.client import Client
from apps.benchmarks.harness.types import CHAT, MAX_PROMPT_TOKENS, LevelSpec, PromptLengthError
from vllm_adapter import endpoints

PROMPT_BUILD_PARALLEL = 8
# The filler words are drawn once, up to this many; longer prompts repeat them. (Held for
# the life of the process: what a 50-million-token prompt once drew must not stay.)
FILLER_CACHE_WORDS = 16_384


# Common English words that are one token (with and without a leading space) in the usual
# BPE vocabularies and in sparksim's; the salt and the filler are made of them, so each
# added word adds exactly one token and the length search converges in one or two rounds.
_WORD_TEXT = """
the of and to in is it for on with as at by from that this be are was or an not but all can
one more time use each new model token memory speed data load work step part test code rate
user team file line page word note case plan task goal path node port unit size type form
list rule core cache batch queue stream server client engine layer block prompt answer reply
request result value number table graph chart metric report level range scale limit window
length width height depth weight power energy light sound water river lake ocean wind rain
snow cloud storm fire stone sand rock tree leaf root seed flower garden field farm forest
mountain valley hill road bridge train car ship boat harbor coast island city town village
house room door wall floor chair bed kitchen bread milk cheese rice soup fruit apple tea
coffee sugar salt oil egg fish bird dog cat horse sheep cow bee song music book story paper
letter name place world country state nation history art film game sport ball player market
price money bank office shop store service system process program project product study
science method theory idea reason example fact point question problem lesson class school
student teacher friend family child people person group company government law spring summer
autumn winter morning evening night day week month year hour minute second moment first last
next early late small large long short high low fast slow hot cold warm cool dry wet green
blue red white black gray brown golden silver quiet loud soft hard clear simple good great
old young open close start stop read write build make take give find keep send show move
turn help look walk talk play run
"""
_WORDS = tuple(dict.fromkeys(_WORD_TEXT.split()))
_PAD_WORDS = ("a", "the", "of", "to", "and", "in", "is", "it", "on", "at")
_filler: list[str] = []  # at most FILLER_CACHE_WORDS, drawn 4,096 at a time


def _filler_words(n: int) -> list[str]:
    """The first `n` filler words: always the same words for the same `n`, and each prefix
    of a longer filler (the length search relies on both)."""
    while len(_filler) < min(n, FILLER_CACHE_WORDS):
        rng = random.Random(len(_filler) * 7919 + 17)  # noqa: S311 - text, not secrets
        _filler.extend(rng.choice(_WORDS) for _ in range(4096))
    if n <= len(_filler):
        return _filler[:n]
    return list(itertools.islice(itertools.cycle(_filler), n))


def _salt_text(salt: str) -> str:
    digest = hashlib.blake2b(salt.encode(), digest_size=8).digest()
    return "Request " + " ".join(_WORDS[b % len(_WORDS)] for b in digest) + "."


def _text(head: str, k: int, tail: Sequence[str] = ()) -> str:
    words = [*_filler_words(k), *tail]
    return head + (" " + " ".join(words) if words else "")


def filler_text(head: str, words: int) -> str:
    """`head`, then `words` filler words (about one token each): text of about a length,
    where an exact one is not needed (a session's follow-up questions)."""
    return _text(head, words)


def _prompt(head: str, k: int, tail: Sequence[str] = ()) -> list[dict]:
    return [{"role": "user", "content": _text(head, k, tail)}]


async def build_text(client: Client, n_tokens: int, salt: str, system: str | None = None) -> str:
    """A completions prompt of exactly `n_tokens` (the server's `POST /tokenize` of the
    text, special tokens added as /v1/completions adds them), built as `build_messages`;
    `system` opens it (a shared prefix)."""
    return await _build(client, n_tokens, salt, chat=False, system=system)


async def build_messages(
    client: Client, n_tokens: int, salt: str, system: str | None = None
) -> list[dict]:
    """Chat messages whose chat-templated length (the server's `POST /tokenize` with
    `add_generation_prompt`) is exactly `n_tokens`: a unique opening made from `salt`, then
    filler words. The filler length that worked for `n_tokens` is remembered on the client,
    so later salts usually cost one /tokenize round-trip (a check). Raises
    PromptLengthError when no exact length is found. With `system`, the messages open
    with that system prompt (a shared prefix) and the length counts it."""
    return await _build(client, n_tokens, salt, chat=True, system=system)


def _maker(chat: bool, system: str | None):
    """(opening, filler words, tail words) -> the prompt: chat messages or text, after the
    shared system prompt when there is one."""
    if system is None:
        return _prompt if chat else _text
    if chat:
        return lambda head, k, tail=(): [{"role": "system", "content": system},
                                         *_prompt(head, k, tail)]  # fmt: skip
    return lambda head, k, tail=(): system + "\n\n" + _text(head, k, tail)


async def _build(
    client: Client, n_tokens: int, salt: str, *, chat: bool, system: str | None = None
):
    if n_tokens < 1:
        raise PromptLengthError("a prompt needs at least one token")
    if n_tokens > MAX_PROMPT_TOKENS:
        raise PromptLengthError(
            f"{n_tokens:,} prompt tokens: a prompt has at most {MAX_PROMPT_TOKENS:,}"
        )
    head = _salt_text(salt)
    counts: dict[tuple[int, tuple[str, ...]], int] = {}

    make = _maker(chat, system)
    counter = client.count_chat_tokens if chat else client.count_text_tokens
    key = (chat, n_tokens, system is not None)

    async def count(k: int, tail: tuple[str, ...] = ()) -> int:
        if (k, tail) not in counts:
            counts[k, tail] = await counter(make(head, k, tail))
        return counts[k, tail]

    def done(k: int, tail: tuple[str, ...] = ()):
        client._templates[key] = (k, tail)
        return make(head, k, tail)

    known = client._templates.get(key)
    if known is not None:
        k, tail = known
        got = await count(k, tail)
        if got == n_tokens:
            return done(k, tail)
        k = max(k + n_tokens - got, 0)
    else:
        base = await count(0)
        if base > n_tokens:
            raise PromptLengthError(
                f"{n_tokens} prompt tokens is shorter than "
                + ("the chat template and " if chat else "")
                + ("the shared prefix and " if system is not None else "")
                + f"the salt ({base} tokens)"
            )
        k = n_tokens - base
    # Newton steps at ~one token per word...
    for _ in range(6):
        got = await count(k)
        if got == n_tokens:
            return done(k)
        k_next = max(k + n_tokens - got, 0)
        if (k_next, ()) in counts:
            break
        k = k_next
    # ...then bisection between the longest filler below and the shortest above...
    below = [k for (k, t), v in counts.items() if not t and v < n_tokens]
    above = [k for (k, t), v in counts.items() if not t and v > n_tokens]
    lo = max(below, default=0)
    hi = min(above, default=lo + 64)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = await count(mid)
        if got == n_tokens:
            return done(mid)
        lo, hi = (mid, hi) if got < n_tokens else (lo, mid)
    # ...then, where one more word adds two tokens, short words one token at a time.
    tail: tuple[str, ...] = ()
    current = await count(lo)
    while current < n_tokens and len(tail) < 16:
        for word in _PAD_WORDS:
            got = await count(lo, (*tail, word))
            if got == n_tokens:
                return done(lo, (*tail, word))
            if got == current + 1:
                tail, current = (*tail, word), got
                break
        else:
            break
    raise PromptLengthError(
        f"could not build a prompt of exactly {n_tokens} tokens (closest: "
        f"{sorted(counts.values(), key=lambda v: abs(v - n_tokens))[0]})"
    )


def request_body(model: str, chat: bool, prompt, output: int, salt: str | None) -> bytes:
    """One streamed request asking for exactly `output` tokens (`min_tokens`, `ignore_eos`):
    `prompt` is chat messages (chat) or text; `salt` keeps its prefix out of the cache."""
    sampling = {"max_tokens": output, "stream": True, "continuous_usage": True,
                "min_tokens": output, "ignore_eos": True, "temperature": 0,
                "cache_salt": salt}  # fmt: skip
    if chat:
        return json.dumps(endpoints.chat_body(model, prompt, **sampling)).encode()
    return json.dumps(endpoints.completion_body(prompt, model=model, **sampling)).encode()


async def dataset_payloads(
    client: Client, spec: LevelSpec, total: int
) -> tuple[list[tuple[int, int]], list[bytes], dict]:
    """A dataset level's requests (datasets.py): each one's intended lengths (the prompt as
    the endpoint counts it: chat-templated for chat), its body, and the sample's summary."""
    got = await datasets.sample(client, spec.dataset, total)
    chat = spec.endpoint == CHAT
    base = uuid.uuid4().hex[:12]
    gate = asyncio.Semaphore(PROMPT_BUILD_PARALLEL)

    async def one(i: int) -> tuple[tuple[int, int], bytes]:
        text, output = got.prompts[i], got.answer_tokens[i]
        prompt = [{"role": "user", "content": text}] if chat else text
        if chat:  # the user message as the chat template wraps it
            async with gate:
                prompt_tokens = await client.count_chat_tokens(prompt)
        else:
            prompt_tokens = got.prompt_tokens[i]
        return (prompt_tokens, output), request_body(
            client.model, chat, prompt, output, f"{base}-{i}"
        )

    built = await asyncio.gather(*(one(i) for i in range(total)))
    return [b[0] for b in built], [b[1] for b in built], got.summary()


async def build_payloads(
    client: Client, spec: LevelSpec, total: int, lengths: list[tuple[int, int]] | None = None
) -> list[bytes]:
    """One body per request (`lengths`: each one's prompt and answer tokens; the
    scenario's for all by default)."""
    scenario = spec.scenario
    lengths = lengths or [(scenario.prompt_tokens, scenario.output_tokens)] * total
    base = uuid.uuid4().hex[:12]

    chat = spec.endpoint == CHAT
    build = build_messages if chat else build_text

    def body(prompt, salt: str | None = None, output: int = scenario.output_tokens) -> bytes:
        return request_body(client.model, chat, prompt, output, salt)

    if spec.warm_prefix:
        return [body(await build(client, scenario.prompt_tokens, base))] * total
    gate = asyncio.Semaphore(PROMPT_BUILD_PARALLEL)
    shared = spec.shared_prefix
    prefixes: list[str] = []
    if shared is not None:  # each of exactly its tokens, by the server's own tokenizer
        for g in range(shared.groups):
            prefixes.append(await build_text(client, shared.tokens, f"{base}-group-{g}"))

    async def one(i: int) -> bytes:
        salt = f"{base}-{i}"
        system = prefixes[i % len(prefixes)] if prefixes else None
        prompt_tokens, output_tokens = lengths[i]
        async with gate:
            prompt = await build(client, prompt_tokens, salt, system)
        # A shared prefix must be cacheable across requests: no cache_salt (its own
        # opening keeps each request's rest unique).
        return body(prompt, None if prefixes else salt, output_tokens)

    # The first one alone finds the template; the rest reuse it.
    first = await one(0)
    return [first, *await asyncio.gather(*(one(i) for i in range(1, total)))]

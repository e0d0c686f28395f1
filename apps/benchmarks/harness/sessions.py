"""Multi-turn chat sessions: the team-workload shape ("eight of us chatting"). A level's
`concurrency` is the number of people; each runs one session after another. A session's
first question is the scenario's prompt (exactly its tokens, built as every prompt is);
each later turn sends the whole conversation back — every earlier question and the
answers the server actually gave — plus a new question of about `question_tokens`, after the
person's think time. So the prompt grows turn by turn by each answer, as in a real chat,
and the prefix cache can serve what it has seen (a session keeps one `cache_salt`; no two
sessions share a prefix).

Cost in the measured window: a later turn's body is serialised when it is due (JSON of
the conversation so far: microseconds for a few turns of a few thousand tokens)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from apps.benchmarks.harness.client import Client
from apps.benchmarks.harness.prompts import PROMPT_BUILD_PARALLEL, build_messages, filler_text
from apps.benchmarks.harness.prompts import request_body as _body
from apps.benchmarks.harness.types import LevelSpec, Sessions


@dataclass
class Openings:
    """What a sessions level builds before anything is sent: each session's first
    messages and salt, and the follow-up question of each later turn (the same text at
    the same turn for every session: their prefixes already differ)."""

    messages: list[list[dict]]
    salts: list[str]
    questions: list[str]


async def build_openings(client: Client, prompt_tokens: int, count: int,
                         sessions: Sessions) -> Openings:  # fmt: skip
    base = uuid.uuid4().hex[:12]
    salts = [f"{base}-s{i}" for i in range(count)]
    gate = asyncio.Semaphore(PROMPT_BUILD_PARALLEL)

    async def one(salt: str) -> list[dict]:
        async with gate:
            return await build_messages(client, prompt_tokens, salt)

    first = await one(salts[0])  # finds the template; the rest reuse it
    messages = [first, *await asyncio.gather(*(one(s) for s in salts[1:]))]
    # about question_tokens each (one token a word): a follow-up's exact length does not
    # matter (the server counts each turn's whole prompt), and a short one must not fail
    # for being shorter than a prompt's unique opening
    questions = [
        filler_text(f"Next, part {t + 1}:", max(sessions.question_tokens - 4, 1))
        for t in range(1, sessions.turns)
    ]
    return Openings(messages, salts, questions)


async def run_sessions(
    client: Client,
    spec: LevelSpec,
    openings: Openings,
    first_index: int,
    one_request: Callable,
    results: list,
    scale: float,
    should_stop: Callable[[], bool],
    finished: Callable[[], None],
) -> bool:
    """`spec.concurrency` people, each taking the next session until none is left; a
    session's results go to results[first_index + session × turns + turn − 1]. A failed
    turn ends its session (its later turns are not sent). Returns whether a stop ended
    the phase early."""
    sessions: Sessions = spec.sessions
    output = spec.scenario.output_tokens
    queue = iter(range(len(openings.messages) - first_index))
    state = {"stopped": False}

    async def session(s: int) -> None:
        salt = openings.salts[first_index + s]
        messages = list(openings.messages[first_index + s])
        intended = spec.scenario.prompt_tokens
        for turn in range(1, sessions.turns + 1):
            if should_stop():
                state["stopped"] = True
                return
            payload = _body(client.model, True, messages, output, salt)
            index = first_index + s * sessions.turns + turn - 1
            r = await one_request(client, payload, index, False, (intended, output), scale,
                                  False, True)  # fmt: skip
            r.turn = turn
            if turn > 1:  # the conversation's length is the server's count of it
                r.intended_prompt_tokens, r.prompt_mismatch = r.prompt_tokens or 0, False
            results[index] = r
            finished()
            if not r.ok or turn == sessions.turns:
                return
            messages += [{"role": "assistant", "content": r.answer or ""},
                         {"role": "user", "content": openings.questions[turn - 1]}]  # fmt: skip
            r.answer = None  # the conversation holds it now
            if sessions.think_s:
                await asyncio.sleep(sessions.think_s / scale)

    async def person() -> None:
        for s in queue:
            await session(s)
            if state["stopped"]:
                return

    count = len(openings.messages) - first_index
    await asyncio.gather(*(person() for _ in range(min(spec.concurrency, count))))
    return state["stopped"]

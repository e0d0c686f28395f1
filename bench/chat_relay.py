"""Chat relay latency: what the panel's WebSocket relay adds on top of the model's own stream.

One run sets up a throwaway panel (temp SQLite, private Redis, unique CHANNELS_PREFIX), a
sparksim server at time scale 1 (the Qwen3.5-35B profile, a real Spark's pace) behind a READY
run, and the ASGI web server (uvicorn) as a real process, and logs a member in over HTTP.
For each concurrency level it alternates, round after round, two paths with the same requests
(same messages, model, max_tokens, sampling):
- relay: N WebSocket clients on /ws/chat/<conversation>/ (a fresh conversation each, so
  every prompt is the same size) send one message each at once and time every `delta` and
  `done` they receive;
- direct: N httpx clients stream the same requests from sparksim itself and time every SSE
  chunk with content.
Ground truth is sparksim's /sparksim/trace: when it wrote each token-bearing chunk
(time.monotonic(), the same clock as this process's). The relay hides the upstream response
ids, so they come from `?recent=N` right after a relay round and are told apart by their
token counts: every prompt is a "/sparksim echo TEXT" message (the reply is TEXT, verbatim)
and each concurrent slot's TEXT has its own length (64, 63, … tokens; max_tokens 64).
Per relay answer it reads:
- TTFT added: the first delta's arrival − the emission of the first token;
- last-token delay: for each delta, its arrival − the emission of the newest token in it
  (what a reader sees of the tail of the stream);
- oldest-token wait: for each delta, its arrival − the emission of the oldest token in it,
  i.e. the longest any token waited; by design ≤ the coalescing interval (COALESCE_S), so
  what exceeds it is the relay's own overhead ("beyond coalescing");
- pre-request: the upstream request's start at sparksim − the WebSocket send (the relay's
  checks and database writes before it asks the model); "+pre-request" is the TTFT the
  browser sees beyond the model's own (first delta − send − sparksim's TTFT);
- `done` − the last token;
- integrity: sequence numbers without gaps, text identical to the direct stream's, and a
  `done` for every answer (one that never comes is counted after QUIET_S of silence).
The direct path gives the measurement floor (chunk arrival − emission with no relay).
Targets (p99, beyond the coalescing interval): ≤ 15 ms on TTFT, ≤ 5 ms per token.
Each level runs ROUNDS rounds per repeat; tables give medians over repeats with the spread
(min–max). When taskset is available the web server and Redis run on CPU 0 and sparksim
and the clients on CPU 1.

Run with `make bench` (or `python -m bench.chat_relay`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from apps.chat.consumers import COALESCE_S
from bench._stack import (
    ROOT,
    Stack,
    free_port,
    login,
    manage,
    med_range,
    panel_env,
    pct,
    pin,
    start_redis,
    start_web,
    temp_stack,
    wait_until,
)

MODEL = "nvidia/Qwen3.5-35B-A3B-NVFP4"
RECIPE = "qwen3-5-35b-max-single-user"
USER = "bench-member"
PASSWORD = secrets.token_urlsafe(24)  # a throwaway user in a throwaway database
ECHO = "/sparksim echo "
MAX_TOKENS = 64
QUIET_S = 5.0  # an answer with no message for this long has lost its `done`
TTFT_TARGET_MS = 15.0  # p99, beyond the coalescing interval
TOKEN_TARGET_MS = 5.0  # p99, beyond the coalescing interval
TEXT = (
    "Public libraries offer something rare: a quiet place that asks nothing of you, open to "
    "anyone, where the shelves hold more than any one person could read in a lifetime and "
    "the staff will help you find the one book you did not know you needed. They lend tools, "
    "teach children to read, keep old newspapers, and give a warm seat to people with "
    "nowhere else to go. A town that keeps its library open keeps a promise to itself."
)


SETUP = """
import json
from apps.chat.models import Conversation
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
from django.contrib.auth import get_user_model
port, count = {port}, {count}
recipe = Recipe.objects.get(slug={recipe!r})
host = Host.objects.create(name="bench-chat", engine="process", simulated=True,
                           port_min=port, port_max=port)
run = Run.objects.create(recipe=recipe, host=host, port=port, image="x", state=RunState.READY)
user = get_user_model().objects.get(username={user!r})
ids = [Conversation.objects.create(user=user, run=run, recipe=recipe, temperature=0.7, top_p=1.0,
                                   max_tokens={max_tokens}).pk for _ in range(count)]
print(json.dumps({{"ids": ids, "model": run.served_name}}))
"""


# --- the prompts ----------------------------------------------------------------------------


def echo_texts(sim: httpx.Client, tag: str, slots: int) -> list[str]:
    """One reply per concurrent slot, `MAX_TOKENS - slot` tokens long (so the traces of one
    round tell the slots apart by their length), each starting with its own tag (so no two
    prompts share a cached prefix beyond the chat template)."""
    texts = []
    for slot in range(slots):
        want = MAX_TOKENS - slot
        ids = sim.post("/tokenize", json={"model": MODEL, "prompt": f"[{tag}-{slot}] {TEXT}"})
        ids = ids.json()["tokens"]
        for k in range(want, want + 8):
            text = sim.post("/detokenize", json={"model": MODEL, "tokens": ids[:k]}).json()
            text = text["prompt"].strip()
            count = sim.post("/tokenize", json={"model": MODEL, "prompt": text}).json()["count"]
            if count == want:
                texts.append(text)
                break
        else:
            raise RuntimeError(f"could not make a {want}-token reply")
    return texts


# --- one round of each path ---------------------------------------------------------------


async def relay_round(ws_base: str, origin: str, cookie: str, conversations: list[int],
                      texts: list[str]) -> list[dict]:  # fmt: skip
    """Every conversation sends its message at once; each receive timed on arrival."""
    headers = {"Cookie": f"sessionid={cookie}"}
    go = asyncio.Event()
    ready = [asyncio.Event() for _ in conversations]
    received: list[list[tuple[float, dict]]] = [[] for _ in conversations]

    async def one(i: int) -> dict:
        url = f"{ws_base}/ws/chat/{conversations[i]}/"
        async with connect(url, origin=origin, additional_headers=headers, open_timeout=30,
                           max_queue=None) as ws:  # fmt: skip
            ready[i].set()
            await go.wait()
            sent = time.monotonic()
            await ws.send(json.dumps({"type": "send", "content": ECHO + texts[i]}))
            events = received[i]
            while True:
                try:
                    raw = await asyncio.wait_for(ws.recv(), QUIET_S)
                except TimeoutError:
                    break  # no `done`: counted as a problem, the round goes on
                now = time.monotonic()
                message = json.loads(raw)
                events.append((now, message))
                if message.get("type") == "error":
                    raise RuntimeError(f"the relay answered an error: {message}")
                if message.get("type") == "done":
                    break
            return {"sent": sent, "events": events, "text": texts[i]}

    tasks = [asyncio.create_task(one(i)) for i in range(len(conversations))]
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready)), 30)
        go.set()
        return await asyncio.wait_for(asyncio.gather(*tasks), 120)
    except TimeoutError:
        got = ", ".join(f"{c}: {len(e)}" for c, e in zip(conversations, received, strict=True))
        raise RuntimeError(f"a relay round did not end in 120 s (messages per conversation: "
                           f"{got})") from None  # fmt: skip
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def direct_round(sim: httpx.AsyncClient, texts: list[str]) -> list[dict]:
    async def one(text: str) -> dict:
        body = {"model": MODEL, "messages": [{"role": "user", "content": ECHO + text}],
                "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.7,
                "top_p": 1.0, "max_tokens": MAX_TOKENS}  # fmt: skip
        sent = time.monotonic()
        chunks, response_id = [], None
        async with sim.stream("POST", "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                now = time.monotonic()
                payload = json.loads(line[6:])
                response_id = response_id or payload["id"]
                for choice in payload.get("choices") or []:
                    delta = choice.get("delta") or {}
                    piece = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
                    if piece:
                        chunks.append((now, piece))
        return {"sent": sent, "id": response_id, "chunks": chunks, "text": text}

    return await asyncio.wait_for(asyncio.gather(*(one(t) for t in texts)), 180)


async def traces(sim: httpx.AsyncClient, ids: list[str]) -> dict[str, dict]:
    reply = (await sim.get("/sparksim/trace", params={"ids": ",".join(ids)})).json()
    if reply["missing"]:
        raise RuntimeError(f"sparksim has no trace for {reply['missing']}")
    return reply["traces"]


# --- analysis -------------------------------------------------------------------------------


def _tokens_at(trace: dict) -> tuple[list[int], list[float]]:
    """Cumulative token counts after each chunk of a trace, and the chunks' emission times."""
    counts = list(itertools.accumulate(n for _, n in trace["chunks"]))
    return counts, [t for t, _ in trace["chunks"]]


def analyse_direct(stream: dict, trace: dict) -> dict:
    counts, emitted = _tokens_at(trace)
    if len(stream["chunks"]) != len(emitted):
        raise RuntimeError("a direct stream's chunks do not match its trace")
    chars = list(itertools.accumulate(len(p) for _, p in stream["chunks"]))
    return {
        "floor": [a - e for (a, _), e in zip(stream["chunks"], emitted, strict=True)],
        "pre_request": trace["started_at"] - stream["sent"],
        "e2e_ttft": stream["chunks"][0][0] - stream["sent"],
        "engine_ttft": trace["first_token_at"] - trace["started_at"],
        "text": "".join(p for _, p in stream["chunks"]),
        # characters of text so far → tokens so far (the same request streams the same text)
        "chars_to_tokens": dict(zip(chars, counts, strict=True)),
    }


def analyse_relay(stream: dict, trace: dict, direct: dict) -> dict:
    counts, emitted = _tokens_at(trace)
    deltas = [(t, m) for t, m in stream["events"] if m.get("type") == "delta"]
    done_at, done = stream["events"][-1]
    out = {"last_delay": [], "oldest_wait": [], "gaps": [], "tokens_per_delta": [],
           "unaligned": 0, "problems": [], "no_done": 0, "seq_gaps": 0, "text_differs": 0,
           "done_added": []}  # fmt: skip
    if not deltas:
        raise RuntimeError("a relay answer had no delta")
    seqs = [m["seq"] for _, m in deltas]
    if seqs != list(range(1, len(seqs) + 1)):
        out["seq_gaps"] = 1
        out["problems"].append(f"sequence numbers {seqs}")
    text = "".join(m["content"] + m["reasoning"] for _, m in deltas)
    if text != direct["text"]:
        out["text_differs"] = 1
        out["problems"].append(f"text differs from the direct stream's ({len(text)} of "
                               f"{len(direct['text'])} characters)")  # fmt: skip
    if done.get("type") != "done":
        out["no_done"] = 1
        out["problems"].append(f"no `done` within {QUIET_S:g} s of the last delta")
    elif (done.get("status") != "complete" or done.get("completion_tokens") != counts[-1]
          or done.get("seq") != seqs[-1]):  # fmt: skip
        out["problems"].append(
            f"done: {done.get('status')}, seq {done.get('seq')}, "
            f"{done.get('completion_tokens')} tokens (trace {counts[-1]})"
        )
    else:
        out["done_added"].append(done_at - emitted[-1])
    chars, before = 0, 0  # text and tokens up to the previous delta
    for i, (arrived, message) in enumerate(deltas):
        if i:
            out["gaps"].append(arrived - deltas[i - 1][0])
        chars += len(message["content"]) + len(message["reasoning"])
        upto = direct["chars_to_tokens"].get(chars)
        if upto is None or upto not in counts:
            out["unaligned"] += 1  # text lost, or the two streams were chunked differently
            before = None
            continue
        out["last_delay"].append(arrived - emitted[counts.index(upto)])
        if before is not None:  # the oldest token is known only after an aligned delta
            oldest = emitted[next(k for k, c in enumerate(counts) if c > before)]
            out["oldest_wait"].append(arrived - oldest)
            out["tokens_per_delta"].append(upto - before)
        before = upto
    out.update(
        ttft_added=deltas[0][0] - emitted[0],
        pre_request=trace["started_at"] - stream["sent"],
        e2e_ttft=deltas[0][0] - stream["sent"],
        # what the browser waits beyond the model's own TTFT, the relay's checks included
        ttft_e2e_added=(deltas[0][0] - stream["sent"])
        - (trace["first_token_at"] - trace["started_at"]),
        deltas=len(deltas),
    )
    return out


def summarise(relay: list[dict], direct: list[dict]) -> dict:
    """One repeat of one level: pooled percentiles in ms."""

    def flat(rows: list[dict], key: str) -> list[float]:
        return [x * 1000 for r in rows for x in (r[key] if isinstance(r[key], list) else [r[key]])]

    ttft = flat(relay, "ttft_added")
    oldest = flat(relay, "oldest_wait")
    last = flat(relay, "last_delay")
    c = COALESCE_S * 1000
    return {
        "answers": len(relay),
        "deltas": sum(r["deltas"] for r in relay),
        "ttft_p50": pct(ttft, 50),
        "ttft_p99": pct(ttft, 99),
        "ttft_beyond_p99": pct(ttft, 99) - c,
        "ttft_e2e_p50": pct(flat(relay, "ttft_e2e_added"), 50),
        "ttft_e2e_p99": pct(flat(relay, "ttft_e2e_added"), 99),
        "last_p50": pct(last, 50),
        "last_p99": pct(last, 99),
        "oldest_beyond_p50": pct(oldest, 50) - c,
        "oldest_beyond_p99": pct(oldest, 99) - c,
        "oldest_max": max(oldest) - c if oldest else float("nan"),
        "gap_p50": pct(flat(relay, "gaps"), 50),
        "gap_p99": pct(flat(relay, "gaps"), 99),
        "tokens_per_delta": statistics.mean(n for r in relay for n in r["tokens_per_delta"]),
        "done_p50": pct(flat(relay, "done_added"), 50),
        "done_p99": pct(flat(relay, "done_added"), 99),
        "pre_relay_p50": pct(flat(relay, "pre_request"), 50),
        "pre_relay_p99": pct(flat(relay, "pre_request"), 99),
        "pre_direct_p50": pct(flat(direct, "pre_request"), 50),
        "floor_p50": pct(flat(direct, "floor"), 50),
        "floor_p99": pct(flat(direct, "floor"), 99),
        "e2e_relay_p50": pct(flat(relay, "e2e_ttft"), 50),
        "e2e_direct_p50": pct(flat(direct, "e2e_ttft"), 50),
        "engine_ttft_p50": pct(flat(direct, "engine_ttft"), 50),
        "unaligned": sum(r["unaligned"] for r in relay),
        "no_done": sum(r["no_done"] for r in relay),
        "seq_gaps": sum(r["seq_gaps"] for r in relay),
        "text_differs": sum(r["text_differs"] for r in relay),
        "problems": sum(len(r["problems"]) for r in relay),
    }


# --- the run --------------------------------------------------------------------------------


async def one_level(sim_url: str, ws_base: str, origin: str, cookie: str, level: int,
                    rounds: int, conversations: list[int], tag: str) -> dict:  # fmt: skip
    """`rounds` rounds (plus one warm-up) of both paths, alternating which goes first."""
    limits = httpx.Limits(max_connections=level + 4, max_keepalive_connections=level + 4)
    relay_rows: list[dict] = []
    direct_rows: list[dict] = []
    problems: list[str] = []
    async with httpx.AsyncClient(base_url=sim_url, timeout=60, limits=limits,
                                 trust_env=False) as sim:  # fmt: skip
        with httpx.Client(base_url=sim_url, timeout=30, trust_env=False) as sync_sim:
            prompts = [echo_texts(sync_sim, f"{tag}r{r}", level) for r in range(rounds + 1)]
        for r in range(rounds + 1):
            texts = prompts[r]
            convs = conversations[r * level : (r + 1) * level]
            relay = direct = None
            for path in ("relay", "direct") if r % 2 == 0 else ("direct", "relay"):
                if path == "relay":
                    relay = await relay_round(ws_base, origin, cookie, convs, texts)
                    ids = (await sim.get("/sparksim/trace", params={"recent": level})).json()
                    relay_traces = await traces(sim, ids["ids"])
                else:
                    direct = await direct_round(sim, texts)
                    direct_traces = await traces(sim, [d["id"] for d in direct])
            if r == 0:
                continue  # warm-up: connections, the web server's first chat, caches
            # The slots' replies differ in length: a trace's token count names its slot.
            by_length = {sum(n for _, n in t["chunks"]): t for t in relay_traces.values()}
            if len(by_length) != level:
                raise RuntimeError("two relay traces of one round have the same length")
            for slot in range(level):
                d = analyse_direct(direct[slot], direct_traces[direct[slot]["id"]])
                trace = by_length.get(MAX_TOKENS - slot)
                if trace is None:
                    raise RuntimeError(f"no relay trace with {MAX_TOKENS - slot} tokens")
                row = analyse_relay(relay[slot], trace, d)
                problems += [f"round {r} slot {slot}: {p}" for p in row["problems"]]
                relay_rows.append(row)
                direct_rows.append(d)
    summary = summarise(relay_rows, direct_rows)
    summary["problem_list"] = problems
    return summary


def start_stack(stack: Stack, count: int) -> tuple[dict, str, list[int]]:
    env = panel_env(stack.tmp)
    start_redis(stack, env, cpu=0)

    sim_port = free_port()
    stack.start("sparksim", [*pin(1), sys.executable, "-m", "sparksim", "serve", MODEL,
                "--host", "127.0.0.1", "--port", str(sim_port),
                "--gpu-memory-utilization", "0.8", "--max-model-len", "16384",
                "--max-num-seqs", "16", "--time-scale", "1", "--load-time-scale", "100000",
                "--jit-seconds", "0", "--log-level", "WARNING"], env)  # fmt: skip
    sim_url = f"http://127.0.0.1:{sim_port}"

    manage(env, "migrate", "--noinput")
    manage(env, "createuser", USER, "--role", "member", "--password-stdin",
           stdin=PASSWORD + "\n")  # fmt: skip
    code = SETUP.format(port=sim_port, count=count, recipe=RECIPE, user=USER,
                        max_tokens=MAX_TOKENS)  # fmt: skip
    made = json.loads(manage(env, "shell", "-c", code).strip().splitlines()[-1])
    if made["model"] != MODEL:
        raise RuntimeError(f"the recipe serves {made['model']!r}, not {MODEL!r}")

    _, url = start_web(stack, env, cpu=0)
    wait_until(lambda: httpx.get(sim_url + "/v1/models", timeout=1).status_code == 200, 60,
               "sparksim", stack)  # fmt: skip
    probe = httpx.get(sim_url + "/sparksim/trace", params={"recent": 1}, timeout=5)
    if probe.status_code != 200:
        raise RuntimeError("this sparksim has no /sparksim/trace?recent=N (ground truth)")
    cookie = login(url, USER, PASSWORD, trust_env=False)
    return {"url": url, "sim_url": sim_url}, cookie, made["ids"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1:10,8:5", help="concurrency:rounds,…")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(ROOT / "var" / "bench-chat-relay.json"))
    args = parser.parse_args()
    levels = [tuple(int(x) for x in item.split(":")) for item in args.levels.split(",")]
    if any(n > MAX_TOKENS // 2 for n, _ in levels):
        raise SystemExit(f"at most {MAX_TOKENS // 2} concurrent answers")
    with temp_stack("bench-chat-relay-", one_at_a_time=True) as stack:
        count = args.repeats * sum(n * (rounds + 1) for n, rounds in levels)
        urls, cookie, conversations = start_stack(stack, count)
        if pin(1):
            os.sched_setaffinity(0, {1})
        ws_base = urls["url"].replace("http://", "ws://")
        pinned = "web/Redis on CPU 0, sparksim/clients on CPU 1" if pin(1) else "unpinned"
        print(f"chat relay: Qwen3.5-35B profile at time scale 1, {MAX_TOKENS}-token answers, "
              f"coalescing {COALESCE_S * 1000:.0f} ms, {args.repeats} repeat(s) of "
              f"{', '.join(f'{r} rounds at c={n}' for n, r in levels)} (+1 warm-up each), "
              f"relay and direct alternating; {pinned}")  # fmt: skip
        runs: dict[int, list[dict]] = {n: [] for n, _ in levels}
        left = iter(conversations)
        for rep in range(args.repeats):
            for n, rounds in levels:
                stack.check()
                convs = [next(left) for _ in range(n * (rounds + 1))]
                row = asyncio.run(one_level(urls["sim_url"], ws_base, urls["url"], cookie, n,
                                            rounds, convs, f"{rep}c{n}"))  # fmt: skip
                runs[n].append(row)
                print(f"  repeat {rep + 1} c={n}: {row['answers']} answers, {row['deltas']} "
                      f"deltas; TTFT added p50 {row['ttft_p50']:.1f} / p99 {row['ttft_p99']:.1f} "
                      f"ms; oldest-token wait beyond {COALESCE_S * 1000:.0f} ms p50 "
                      f"{row['oldest_beyond_p50']:.1f} / p99 {row['oldest_beyond_p99']:.1f} ms; "
                      f"last-token delay p50 {row['last_p50']:.1f} / p99 {row['last_p99']:.1f} "
                      f"ms; direct floor p99 {row['floor_p99']:.2f} ms; no done {row['no_done']}, "
                      f"seq gaps {row['seq_gaps']}, text differs {row['text_differs']}",
                      flush=True)  # fmt: skip
                for problem in row["problem_list"][:5]:
                    print(f"    ! {problem}")

        print("\nAdded by the relay, ms (median over repeats, min–max); −40: beyond the coalescing "
              "interval")  # fmt: skip
        print(f"{'c':>3} {'answers/deltas':>14} {'TTFT added p50':>18} {'TTFT added p99':>18} "
              f"{'p99 −40':>7} {'+pre-request p99':>18} {'last-token p50':>16} "
              f"{'last-token p99':>16} {'oldest-token p99 −40':>20} {'verdict':>18}")  # fmt: skip
        verdicts = {}
        for n, _ in levels:
            rs = runs[n]

            def col(key: str, rs=rs) -> list[float]:
                return [r[key] for r in rs]

            ttft_ok = statistics.median(col("ttft_beyond_p99")) <= TTFT_TARGET_MS
            token_ok = statistics.median(col("oldest_beyond_p99")) <= TOKEN_TARGET_MS
            verdicts[n] = (ttft_ok, token_ok)
            verdict = f"TTFT {'ok' if ttft_ok else 'MISS'}, token {'ok' if token_ok else 'MISS'}"
            print(f"{n:>3} {rs[0]['answers']:>5}/{statistics.median(col('deltas')):<8.0f} "
                  f"{med_range(col('ttft_p50'), '{:.1f}'):>18} {med_range(col('ttft_p99'), '{:.1f}'):>18} "
                  f"{statistics.median(col('ttft_beyond_p99')):>7.1f} "
                  f"{med_range(col('ttft_e2e_p99'), '{:.1f}'):>18} "
                  f"{med_range(col('last_p50'), '{:.1f}'):>16} {med_range(col('last_p99'), '{:.1f}'):>16} "
                  f"{med_range(col('oldest_beyond_p99'), '{:.1f}'):>20} {verdict:>18}")  # fmt: skip
        print("\nContext, ms (medians over repeats; the last three columns are totals):")
        print(f"{'c':>3} {'delta gap p50/p99':>18} {'tok/delta':>9} {'done p50/p99':>14} "
              f"{'pre-request relay p50/p99':>26} {'direct p50':>10} {'floor p50/p99':>14} "
              f"{'e2e TTFT relay/direct p50':>26} {'engine TTFT':>11} {'no done':>7} "
              f"{'seq gap/text':>12} {'unaligned':>9}")  # fmt: skip
        for n, _ in levels:
            rs = runs[n]

            def m(key: str, rs=rs) -> float:
                return statistics.median(r[key] for r in rs)

            def total(key: str, rs=rs) -> int:
                return sum(r[key] for r in rs)

            answers = total("answers")
            print(f"{n:>3} {m('gap_p50'):>8.1f}/{m('gap_p99'):<9.1f} {m('tokens_per_delta'):>9.2f} "
                  f"{m('done_p50'):>6.1f}/{m('done_p99'):<7.1f} "
                  f"{m('pre_relay_p50'):>12.1f}/{m('pre_relay_p99'):<13.1f} "
                  f"{m('pre_direct_p50'):>10.2f} {m('floor_p50'):>6.2f}/{m('floor_p99'):<7.2f} "
                  f"{m('e2e_relay_p50'):>12.1f}/{m('e2e_direct_p50'):<13.1f} "
                  f"{m('engine_ttft_p50'):>11.1f} {total('no_done'):>3}/{answers:<3} "
                  f"{total('seq_gaps'):>6}/{total('text_differs'):<5} "
                  f"{total('unaligned'):>9}")  # fmt: skip
        c = COALESCE_S * 1000
        print(f"\nTargets (p99 beyond the {c:.0f} ms coalescing interval): TTFT ≤ "
              f"{TTFT_TARGET_MS:g} ms, each token ≤ {TOKEN_TARGET_MS:g} ms — "
              + "; ".join(f"c={n}: TTFT {'met' if t else 'MISSED'}, tokens "
                          f"{'met' if k else 'MISSED'}" for n, (t, k) in verdicts.items()))  # fmt: skip
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({str(n): rs for n, rs in runs.items()}, indent=2))
        print(f"raw results: {args.json}")
        return 0


if __name__ == "__main__":
    sys.exit(main())

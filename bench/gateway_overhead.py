"""What the panel's OpenAI gateway (/v1) adds over a direct connection, beside LiteLLM's proxy.

One sparksim server (Qwen3.5-35B-A3B profile, real time, its run's own API key) and, in
front of it, (a) nothing — the client talks to it directly with the run's key, (b) the
panel (uvicorn with the panel's own HTTP protocol, `sparkpanel.asgi:application`, a
gateway key, Redis for keys/limits/usage), (c) LiteLLM's proxy (PyPI `litellm[proxy]`,
`litellm --config`, one worker, a master key; no database, so no per-request spend rows:
lighter work than the panel's). The same closed-loop streamed chat requests go through each,
interleaved round by round, at 1, 8 and 64 concurrent streams. The client is one asyncio
process (uvloop) with a lean HTTP/1.1 client; it stamps when it starts each request and
when each read carrying generated text arrives.

Per level and target: TTFT (request start → first text) p50/p99, the gap between text
reads p99, and the proxy's CPU per request (user + system time of its process over the
level, from /proc). "Added" = the proxy's figure − the direct figure of the same round.
sparksim and the client share CPU 0, the proxy (and the panel's Redis) CPU 1 (taskset).

Run with `make bench` (or `python -m bench.gateway_overhead`); LiteLLM is installed on
first use into its own venv ($SPARKPANEL_VLLM_STORE/litellm, var/litellm).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from bench._stack import (
    ROOT,
    free_port,
    manage,
    med_range,
    panel_env,
    pct,
    pin,
    start_redis,
    temp_stack,
    wait_until,
)
from vllm_adapter.http1 import Pool

MODEL = "nvidia/Qwen3.5-35B-A3B-NVFP4"
LITELLM_NAME = "bench-model"
LITELLM_KEY = "sk-bench-master"
STORE = Path(os.environ.get("SPARKPANEL_VLLM_STORE",
                            Path.home() / ".cache" / "sparkpanel" / "venvs"))  # fmt: skip
LITELLM_VENV = ROOT / "var" / "litellm"
LITELLM_VERSION = "1.108.7"
TEXT = re.compile(rb'"(?:content|text)":"[^"]')

SETUP = """
import json
from django.contrib.auth import get_user_model
from apps.accounts.roles import Role
from apps.accounts.services import user_set_role
from apps.gateway.keys import key_create
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
user = get_user_model().objects.create_user("bench")
user_set_role(user=user, role=Role.MEMBER)
recipe = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
host = Host.objects.create(name="bench-sim", engine="process", simulated=True,
                           port_min=PORT, port_max=PORT)
run = Run.objects.create(recipe=recipe, host=host, port=PORT, image="x",
                         state=RunState.READY)
print(json.dumps({"key": key_create(user=user, name="bench")[1], "run_key": run.api_key,
                  "model": run.served_name}))
"""


def ensure_litellm() -> Path:
    venv = LITELLM_VENV
    if not (venv / "bin" / "litellm").exists():
        target = STORE / "litellm"
        if not (target / "bin" / "litellm").exists():
            print(f"installing litellm[proxy]=={LITELLM_VERSION} into {target} (once)")
            subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
            subprocess.run([str(target / "bin" / "pip"), "install", "-q",
                            f"litellm[proxy]=={LITELLM_VERSION}"], check=True)  # fmt: skip
        venv.parent.mkdir(parents=True, exist_ok=True)
        if venv.is_symlink() or not venv.exists():
            if venv.is_symlink():
                venv.unlink()
            venv.symlink_to(target)
    return venv / "bin" / "litellm"


def cpu_seconds(pid: int) -> float:
    try:
        proc = psutil.Process(pid)
        total = 0.0
        for p in [proc, *proc.children(recursive=True)]:
            t = p.cpu_times()
            total += t.user + t.system
        return total
    except psutil.NoSuchProcess:
        return 0.0


ID = re.compile(rb'"id":"([^"]+)"')


async def one_request(pool: Pool, host: str, port: int, headers, body: bytes) -> dict:
    sent = time.monotonic()
    response = await pool.request(host, port, "POST", "/v1/chat/completions", headers, body,
                                  head_timeout=300, read_timeout=300)  # fmt: skip
    if response.status != 200:
        text = await response.read(1 << 20)
        return {"error": f"HTTP {response.status}: {text[:200]!r}"}
    arrivals: list[float] = []
    request_id = None
    async for data in response.chunks():
        now = time.monotonic()
        if request_id is None and (m := ID.search(data)):
            request_id = m.group(1).decode()
        arrivals.extend([now] * len(TEXT.findall(data)))
    if not arrivals:
        return {"error": "no text"}
    return {"sent": sent, "arrivals": arrivals, "id": request_id}


async def traces(sim_port: int, run_key: str, ids: list[str]) -> dict:
    found: dict = {}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sim_port}", timeout=60,
                                 headers={"authorization": f"Bearer {run_key}"}) as client:  # fmt: skip
        for i in range(0, len(ids), 500):
            answer = await client.get("/sparksim/trace", params={"ids": ",".join(ids[i : i + 500])})
            found.update(answer.json()["traces"])
    return found


async def level(target: dict, concurrency: int, requests: int, output: int, sim) -> dict:
    """Per request, against sparksim's own clock (its trace): how long the request took to
    reach the server (sent → the server had parsed it), and how long each text event took to
    reach the client once the server wrote it. Their sum for the first text event is what a
    relay adds to the time to first token, whatever the server's own scheduling did."""
    pool = Pool()
    body = json.dumps({
        "model": target["model"], "stream": True, "max_tokens": output, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Write a long story about the sea. " * 8}],
    }).encode()  # fmt: skip
    headers = [(b"content-type", b"application/json"),
               (b"authorization", f"Bearer {target['key']}".encode())]  # fmt: skip
    results: list[dict] = []
    queue = list(range(requests))

    async def worker():
        while queue:
            queue.pop()
            results.append(await one_request(pool, "127.0.0.1", target["port"], headers, body))

    for _ in range(2):  # warm the connections and the proxy
        await one_request(pool, "127.0.0.1", target["port"], headers, body)
    cpu0 = cpu_seconds(target["pid"]) if target.get("pid") else 0.0
    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.monotonic() - t0
    cpu = (cpu_seconds(target["pid"]) - cpu0) if target.get("pid") else 0.0
    pool.close()
    ok = [r for r in results if "arrivals" in r]
    found = await traces(sim[0], sim[1], [r["id"] for r in ok if r["id"]])
    first, chunk, unmatched, legs = [], [], 0, ([], [])
    for r in ok:
        trace = found.get(r["id"] or "")
        if not trace or not trace["chunks"]:
            unmatched += 1
            continue
        writes = [t for t, _ in trace["chunks"]]
        first.append(1000 * ((trace["started_at"] - r["sent"]) + (r["arrivals"][0] - writes[0])))
        legs[0].append(1000 * (trace["started_at"] - r["sent"]))
        legs[1].append(1000 * (r["arrivals"][0] - writes[0]))
        if len(writes) == len(r["arrivals"]):
            chunk.extend(1000 * (a - w) for a, w in zip(r["arrivals"], writes, strict=True))
    return {"ok": len(ok), "failed": len(results) - len(ok), "unmatched": unmatched,
            "wall_s": wall, "first_p50": pct(first, 50), "first_p99": pct(first, 99),
            "chunk_p50": pct(chunk, 50), "chunk_p99": pct(chunk, 99),
            "request_leg_p50": pct(legs[0], 50), "request_leg_p99": pct(legs[0], 99),
            "first_chunk_leg_p50": pct(legs[1], 50), "first_chunk_leg_p99": pct(legs[1], 99),
            "cpu_ms_per_request": 1000 * cpu / max(len(results), 1), "first_ms": first,
            "errors": sorted({r["error"] for r in results if "error" in r})[:3]}  # fmt: skip


def start_litellm(stack, litellm: Path, sim_port: int, run_key: str, model: str, cpu: int):
    port = free_port()
    config = stack.tmp / "litellm.yaml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "model_list": [{"model_name": LITELLM_NAME, "litellm_params": {
            "model": f"hosted_vllm/{model}", "api_base": f"http://127.0.0.1:{sim_port}/v1",
            "api_key": run_key}}],
        "general_settings": {"master_key": LITELLM_KEY},
        "litellm_settings": {"telemetry": False, "drop_params": True,
                             "set_verbose": False, "json_logs": False},
    }))  # fmt: skip
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(stack.tmp),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
           "LITELLM_LOG": "ERROR", "NO_DOCS": "True", "PYTHONUNBUFFERED": "1"}  # fmt: skip
    proc = stack.start("litellm", [*pin(cpu), str(litellm), "--config", str(config),
                       "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"], env)  # fmt: skip
    wait_until(lambda: httpx.get(f"http://127.0.0.1:{port}/health/liveliness",
                                 timeout=1).status_code == 200, 180, "LiteLLM's proxy", stack)  # fmt: skip
    return proc, port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,8,64")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=4, help="requests per stream per level")
    parser.add_argument("--min-requests", type=int, default=32)
    parser.add_argument("--output", type=int, default=64)
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--json", default=str(ROOT / "var" / "bench-gateway.json"))
    args = parser.parse_args()
    litellm = None if args.skip_litellm else ensure_litellm()
    if pin(0):
        os.sched_setaffinity(0, {0})
    with temp_stack("sparkpanel-bench-gateway-", one_at_a_time=True) as stack:
        env = panel_env(stack.tmp)
        env.pop("REDIS_URL", None)
        start_redis(stack, env, cpu=1)
        manage(env, "migrate", "--noinput")
        sim_port = free_port()
        made = json.loads(manage(env, "shell", "-c", SETUP.replace("PORT", str(sim_port)))
                          .strip().splitlines()[-1])  # fmt: skip
        sim_env = {**os.environ, "VLLM_API_KEY": made["run_key"]}
        stack.start("sparksim", [*pin(0), sys.executable, "-m", "sparksim", "serve", MODEL,
                    "--host", "127.0.0.1", "--port", str(sim_port),
                    "--gpu-memory-utilization", "0.85", "--max-model-len", "8192",
                    "--max-num-seqs", "64", "--time-scale", "1", "--load-time-scale",
                    "100000", "--jit-seconds", "0", "--log-level", "WARNING"], sim_env)  # fmt: skip
        auth = {"authorization": f"Bearer {made['run_key']}"}
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{sim_port}/v1/models", headers=auth,
                                     timeout=1).status_code == 200, 60, "sparksim", stack)  # fmt: skip
        web_port = free_port()
        profile = ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE_WEB"]] if os.environ.get(
            "BENCH_PROFILE_WEB") else []  # fmt: skip
        web = stack.start("web", [*pin(1), sys.executable, *profile, "-m", "uvicorn",
                          "sparkpanel.asgi:application", "--host", "127.0.0.1", "--port",
                          str(web_port), "--no-access-log", "--http",
                          os.environ.get("BENCH_HTTP", "sparkpanel.httpserver:HttpToolsBoundedProtocol")], env)  # fmt: skip
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{web_port}/healthz",
                                     timeout=1).status_code < 500, 60, "the panel", stack)  # fmt: skip
        targets = {
            "direct": {"port": sim_port, "key": made["run_key"], "model": made["model"]},
            "panel": {"port": web_port, "key": made["key"], "model": made["model"],
                      "pid": web.pid},
        }  # fmt: skip
        if litellm is not None:
            proc, port = start_litellm(stack, litellm, sim_port, made["run_key"], made["model"], 1)
            targets["litellm"] = {"port": port, "key": LITELLM_KEY, "model": LITELLM_NAME,
                                  "pid": proc.pid}  # fmt: skip
        levels = [int(x) for x in args.levels.split(",")]
        raw: dict = {name: {c: [] for c in levels} for name in targets}
        print(f"gateway overhead: sparksim {MODEL} at real time, {args.output} output tokens, "
              f"streamed chat, closed loop, {args.rounds} rounds; wall ms, median (min–max) "
              "of the rounds")  # fmt: skip
        for r in range(args.rounds):
            for c in levels:
                n = max(c * args.requests, args.min_requests)
                for name, target in targets.items():
                    sim = (sim_port, made["run_key"])
                    raw[name][c].append(asyncio.run(level(target, c, n, args.output, sim)))
            print(f"  round {r + 1} done")
        out = {"levels": levels, "rounds": args.rounds, "raw": raw}
        print(f"\n{'target':>8} {'streams':>7} {'first token delay p50':>22} "
              f"{'p99':>18} {'TTFT added p50':>18} {'TTFT added p99':>18} "
              f"{'chunk delay p99':>18} {'chunk added p99':>18} {'CPU ms/req':>16} "
              f"{'failed':>6}")  # fmt: skip
        summary: dict = {}
        for c in levels:
            direct = raw["direct"][c]
            for name in targets:
                rows = raw[name][c]

                def col(key, rows=rows):
                    return [row[key] for row in rows]

                def added(key, rows=rows, direct=direct):
                    return [row[key] - d[key] for row, d in zip(rows, direct, strict=True)]

                cells = ["", "", "", ""]
                if name != "direct":
                    cells = [med_range(added("first_p50"), "{:.2f}"),
                             med_range(added("first_p99"), "{:.2f}"),
                             med_range(added("chunk_p99"), "{:.2f}"),
                             med_range(col("cpu_ms_per_request"), "{:.2f}")]  # fmt: skip
                    summary.setdefault(name, {})[c] = {
                        "ttft_added_p50_ms": statistics.median(added("first_p50")),
                        "ttft_added_p99_ms": statistics.median(added("first_p99")),
                        "chunk_added_p99_ms": statistics.median(added("chunk_p99")),
                        "cpu_ms_per_request": statistics.median(col("cpu_ms_per_request")),
                    }  # fmt: skip
                print(f"{name:>8} {c:>7} {med_range(col('first_p50'), '{:.2f}'):>22} "
                      f"{med_range(col('first_p99'), '{:.2f}'):>18} {cells[0]:>18} "
                      f"{cells[1]:>18} {med_range(col('chunk_p99'), '{:.2f}'):>18} "
                      f"{cells[2]:>18} {cells[3]:>16} "
                      f"{sum(col('failed')) + sum(col('unmatched')):>6}")  # fmt: skip
                errors = sorted({e for row in rows for e in row["errors"]})
                if errors:
                    print(f"           errors: {errors}")
        # The same percentiles over every round's requests at once (3 x 256 at 64 streams):
        # a p99 of one round rests on its ~3 slowest requests, so the pooled one is steadier.
        print("\npooled over the rounds (every request of every round): TTFT added p50 / p99")
        for c in levels:
            direct = [x for row in raw["direct"][c] for x in row["first_ms"]]
            for name in targets:
                if name == "direct":
                    continue
                mine = [x for row in raw[name][c] for x in row["first_ms"]]
                p50, p99 = pct(mine, 50) - pct(direct, 50), pct(mine, 99) - pct(direct, 99)
                summary[name][c]["ttft_added_p50_pooled_ms"] = p50
                summary[name][c]["ttft_added_p99_pooled_ms"] = p99
                print(f"{name:>8} {c:>7} {p50:>10.2f} {p99:>10.2f}   ({len(mine)} and "
                      f"{len(direct)} requests)")  # fmt: skip
        out["summary"] = summary
        if profile:  # a clean exit writes the profile
            web.send_signal(2)
            web.wait(timeout=60)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"\nraw figures: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Live telemetry fan-out: scrape-to-browser latency and web CPU with 1 and 50 browsers.

One run sets up a throwaway panel (temp SQLite, private Redis, unique CHANNELS_PREFIX), starts
the ASGI web server (uvicorn) and the host agent of a simulated host (`--scrape-interval 1`:
one sample a second) as real processes, logs a member in over HTTP, and opens N WebSocket
clients on /ws/telemetry/host/bench-sim/. Over a fixed window it reads:
- for every message each client receives, time.time() − sample["t"] (same machine, same
  clock). "t" is taken when the agent's step starts, so this includes the scrape itself, the
  agent's database writes, Redis, the web process and the client's event loop;
- the same for a channel-layer subscriber in this process that reads the group straight from
  Redis ("agent→Redis"): the part of the latency that is not the web process's fan-out;
- messages per second per client (≈ 1.0 at 1 Hz);
- the web process's CPU (user + system time / wall time, % of one core), and the agent's
  and Redis's for context.
N = 1 and N = 50 alternate, REPEATS times; medians and the spread (min–max) are printed.
When taskset is available the web server runs on CPU 0 and everything else on CPU 1.

Run with `make bench` (or `python -m bench.telemetry_fanout`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

import psutil
from channels_redis.core import RedisChannelLayer
from websockets.asyncio.client import connect

from bench._stack import (
    ROOT,
    login,
    manage,
    med_range,
    panel_env,
    pct,
    pin,
    start_redis,
    start_web,
    temp_stack,
)

HOST = "bench-sim"
USER = "bench-member"
PASSWORD = secrets.token_urlsafe(24)  # a throwaway user in a throwaway database


def cpu_seconds(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = p.cpu_times()
            total += times.user + times.system
    return total


async def one_round(ws_url: str, origin: str, cookie: str, clients: int, seconds: float,
                    warmup: float, procs: dict[str, psutil.Process | None],
                    layer_url: str, prefix: str) -> dict:  # fmt: skip
    latencies: list[list[float]] = [[] for _ in range(clients)]
    direct: list[float] = []  # the same samples read straight from Redis (no web hop)
    window = {"start": float("inf"), "end": float("inf")}
    connected = [False] * clients

    async def client(i: int) -> None:
        headers = {"Cookie": f"sessionid={cookie}"}
        async with connect(ws_url, origin=origin, additional_headers=headers, open_timeout=30,
                           max_queue=None) as ws:  # fmt: skip
            connected[i] = True
            async for raw in ws:
                now = time.time()
                message = json.loads(raw)
                if message.get("type") != "sample":
                    continue
                if window["start"] <= now < window["end"]:
                    latencies[i].append(now - message["sample"]["t"])
                elif now >= window["end"]:
                    return

    async def probe(channel: str) -> None:
        # Ends by itself like the clients: channels_redis's receive() can swallow a cancel.
        while True:
            message = await layer.receive(channel)
            now = time.time()
            if window["start"] <= now < window["end"]:
                direct.append(now - message["sample"]["t"])
            elif now >= window["end"]:
                return

    layer = RedisChannelLayer(hosts=[{"address": layer_url, "socket_timeout": 15}], prefix=prefix)
    channel = await layer.new_channel()
    await layer.group_add(f"host-{HOST}", channel)
    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    prober = asyncio.create_task(probe(channel))
    try:
        deadline = time.monotonic() + 60
        while not all(connected):
            for task in tasks:
                if task.done():
                    task.result()  # raises the client's error
                    raise RuntimeError("a WebSocket client closed before the window")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {sum(connected)}/{clients} clients connected")
            await asyncio.sleep(0.05)
        await asyncio.sleep(warmup)
        cpu0 = {name: cpu_seconds(p) for name, p in procs.items()}
        t0 = time.time()
        window["start"], window["end"] = t0, t0 + seconds
        await asyncio.sleep(seconds)
        wall = time.time() - t0
        cpu1 = {name: cpu_seconds(p) for name, p in procs.items()}
        # every client (and the probe) returns on its first message after the window
        await asyncio.wait_for(asyncio.gather(*tasks, prober), timeout=15)
    finally:
        window["end"] = min(window["end"], time.time())
        for task in [*tasks, prober]:
            task.cancel()
        await asyncio.wait([*tasks, prober], timeout=5)
        await layer.group_discard(f"host-{HOST}", channel)
        await layer.close_pools()
    flat = sorted(x * 1000 for xs in latencies for x in xs)
    if not flat:
        raise RuntimeError("no samples received in the window")
    rates = [len(xs) / wall for xs in latencies]
    return {
        "clients": clients,
        "wall_s": wall,
        "messages": len(flat),
        "p50_ms": pct(flat, 50),
        "p95_ms": pct(flat, 95),
        "p99_ms": pct(flat, 99),
        "max_ms": flat[-1],
        "direct_p50_ms": statistics.median(direct) * 1000 if direct else float("nan"),
        "rate_median": statistics.median(rates),
        "rate_min": min(rates),
        **{f"cpu_{name}_pct": 100 * (cpu1[name] - cpu0[name]) / wall for name in procs},
        "web_ms_per_msg": 1000 * (cpu1["web"] - cpu0["web"]) / len(flat),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,50")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(ROOT / "var" / "bench-telemetry-fanout.json"))
    args = parser.parse_args()
    levels = [int(x) for x in args.clients.split(",")]
    with temp_stack("bench-telemetry-") as stack:
        env = panel_env(stack.tmp)
        redis_proc = start_redis(stack, env, cpu=1)

        manage(env, "migrate", "--noinput")
        manage(env, "createuser", USER, "--role", "member", "--password-stdin",
               stdin=PASSWORD + "\n")  # fmt: skip
        manage(env, "shell", "-c", "from apps.hosts.models import Host; "
               f"Host.objects.create(name={HOST!r}, engine='process', simulated=True)")  # fmt: skip

        web, url = start_web(stack, env, cpu=0)
        agent = stack.start("hostagent", [*pin(1), sys.executable, "manage.py", "hostagent",
                            "--host", HOST, "--scrape-interval", "1"], env)  # fmt: skip
        cookie = login(url, USER, PASSWORD)
        if pin(1):
            os.sched_setaffinity(0, {1})
        procs = {
            "web": psutil.Process(web.pid),
            "agent": psutil.Process(agent.pid),
            "redis": psutil.Process(redis_proc.pid) if redis_proc else None,
        }
        ws_url = url.replace("http://", "ws://") + f"/ws/telemetry/host/{HOST}/"
        pinned = "web on CPU 0, agent/Redis/clients on CPU 1" if pin(1) else "unpinned"
        print(f"telemetry fan-out: 1 Hz samples of {HOST}, {args.seconds:g} s window after "
              f"{args.warmup:g} s warm-up, {args.repeats} repeat(s); {pinned}")  # fmt: skip

        runs: dict[int, list[dict]] = {n: [] for n in levels}
        for r in range(args.repeats):
            for n in levels:
                stack.check()
                row = asyncio.run(one_round(ws_url, url, cookie, n, args.seconds, args.warmup,
                                            procs, env["REDIS_URL"], env["CHANNELS_PREFIX"]))  # fmt: skip
                runs[n].append(row)
                print(f"  round {r + 1} N={n:>3}: p50 {row['p50_ms']:.1f} ms, p95 "
                      f"{row['p95_ms']:.1f} ms, max {row['max_ms']:.1f} ms (agent→Redis p50 "
                      f"{row['direct_p50_ms']:.1f} ms), "
                      f"{row['rate_median']:.2f} msg/s/client (min {row['rate_min']:.2f}), "
                      f"web CPU {row['cpu_web_pct']:.2f} %", flush=True)  # fmt: skip

        print()
        print(f"{'clients':>7} {'p50 ms':>18} {'p95 ms':>18} {'p99 ms':>18} {'max ms':>18} "
              f"{'msg/s/client':>18} {'web CPU %':>18} {'agent CPU %':>11} {'redis CPU %':>11} "
              f"{'agent→Redis p50 ms':>18}")  # fmt: skip
        for n in levels:
            rs = runs[n]

            def col(key: str, rs=rs) -> list[float]:
                return [r[key] for r in rs]

            print(f"{n:>7} {med_range(col('p50_ms'), '{:.1f}'):>18} {med_range(col('p95_ms'), '{:.1f}'):>18} "
                  f"{med_range(col('p99_ms'), '{:.1f}'):>18} {med_range(col('max_ms'), '{:.1f}'):>18} "
                  f"{med_range(col('rate_median'), '{:.2f}'):>18} {med_range(col('cpu_web_pct'), '{:.2f}'):>18} "
                  f"{statistics.median(col('cpu_agent_pct')):>11.1f} "
                  f"{statistics.median(col('cpu_redis_pct')):>11.1f} "
                  f"{statistics.median(col('direct_p50_ms')):>18.1f}")  # fmt: skip
        lo, hi = min(levels), max(levels)
        if lo != hi:
            cpu_lo = statistics.median(r["cpu_web_pct"] for r in runs[lo])
            cpu_hi = statistics.median(r["cpu_web_pct"] for r in runs[hi])
            p95_lo = statistics.median(r["p95_ms"] for r in runs[lo])
            p95_hi = statistics.median(r["p95_ms"] for r in runs[hi])
            rate = min(r["rate_min"] for r in runs[hi])
            msgs_lo = lo * statistics.median(r["rate_median"] for r in runs[lo])
            msgs_hi = hi * statistics.median(r["rate_median"] for r in runs[hi])
            per_msg = 10 * (cpu_hi - cpu_lo) / (msgs_hi - msgs_lo)  # % of a core → ms per s
            ratio = f"×{cpu_hi / cpu_lo:.1f}" if cpu_lo > 0 else "n/a"
            print(f"\nVerdict: at 1 Hz with {hi} clients, scrape-to-browser p95 is {p95_hi:.0f} ms "
                  f"({p95_lo:.0f} ms with {lo}), the web process uses {cpu_hi:.2f} % of one core "
                  f"({cpu_lo:.2f} % with {lo}; {ratio}; ≈ {per_msg:.2f} ms of web CPU per extra "
                  f"message delivered), every client got ≥ {rate:.2f} msg/s (no hard target; "
                  "latency includes the scrape itself).")  # fmt: skip
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({str(n): rs for n, rs in runs.items()}, indent=2))
        print(f"raw results: {args.json}")
        return 0


if __name__ == "__main__":
    sys.exit(main())

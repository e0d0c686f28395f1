"""On-demand load: from a request for a model that is not loaded to its first token.

One run sets up a throwaway panel (temp SQLite, private Redis, unique CHANNELS_PREFIX), the
ASGI web server (uvicorn) as a real process, one simulated Spark (`engine=process`,
`simulated`, `sim_time_scale` --time-scale, default 10: the Qwen3.5-35B-A3B recipe's cold
start takes ~28 wall seconds) with its own real Celery worker on the host's queue
(prefork, concurrency 1, prefetch 1: the production shape), and the recipe in the
on-demand catalog, allowed on that Spark. Nothing serves the model. Each repeat:

1. one streamed chat completion through the panel's /v1 with `X-SparkPanel-Wait` (the
   panel holds it, sends SSE progress comments, starts the model, and answers once it is
   ready); the client stamps the send, each comment and the first text (content or
   reasoning) it receives;
2. meanwhile a probe in this process asks the run's port for /metrics every PROBE_S
   seconds: sparksim answers 200 from the moment its start-up is over ("Application
   startup complete."), so its first 200 says when the server was ready, before the
   runner saw it;
3. afterwards: the run's row (created_at, its phase timings), sparksim's
   /sparksim/trace for the request (when the server began the request and wrote its first
   token; time.monotonic(), the same clock as this process's), then the run is stopped
   and the next repeat waits until it is stopped (its server gone).

Terms (wall seconds; the run's timings are wall times, converted to this process's
monotonic clock with time.time() − time.monotonic() taken at each repeat):

- request → first token: the client's first text − its send (what a user waits);
- phases = ready − queued, what the run's own record says the start took: created_at
  (the run row, "queued") to timings["ready"]["start"]. It is made of
  queued (the Celery hop: the commit, the task through Redis to the host's worker, the
  runner's work before its first transition), start (starting → warming, as the runner
  saw it: sparksim's process and its start-up phases, then the runner's lag in noticing
  — it reads the log every runner.POLL_S), and warm-up (warming → ready: the runner's
  warm-up requests, the first paying the model's JIT);
- model TTFT: the request's own time in the model server, first token written − request
  begun (the trace);
- overhead = request → first token − (phases + model TTFT) = placement (send → the run
  row: admission, the hold loop's first pass, request_load's lock and placement,
  run_start) + hold (ready → the request begun at the model server: the held request
  notices the run is ready — its hold loop reads the route table's version every
  HOLD_ROUTES_POLL_S, which a run becoming ready bumps — then reloads the table and
  forwards) + relay (first token written → received). Target: ≤ 1 s.

Before the hold loop watched the route table, it looked again only every HOLD_POLL_S (5 s),
and the load's end fell anywhere on that grid; sparksim's start-up is deterministic, so
load k (0-based) of N still runs at a speed (the host's sim_time_scale, set between loads)
that makes its server-paced phases k·HOLD_POLL_S/N seconds shorter than at --time-scale:
the N loads end at spread points of the hold loop's cycle, as loads of unknown length
would (--fixed-scale: every load at --time-scale).
When taskset is available the web server and Redis run on CPU 0, the worker (so the
sparksim it starts) and this process on CPU 1.

Run with `make bench` (or `python -m bench.ondemand_load`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import psutil

from bench._stack import (
    ROOT,
    Stack,
    manage,
    med_range,
    panel_env,
    pin,
    start_redis,
    start_web,
    temp_stack,
    wait_until,
)

RECIPE = "qwen3-5-35b-max-single-user"
HOST = "bench-ondemand"
TARGET_S = 1.0  # the panel's own overhead on a load, request to first token
PROBE_S = 0.025  # how often the probe asks the starting server for /metrics
PROMPT = [{"role": "user", "content": "Say hello."}]
# The Spark's port range: a stopped server's port stays unbindable for a while (its closed
# connections in TIME_WAIT), so each load takes the next one, as on a real host.
PORTS = 20

SETUP = """
PORTS = {ports}
import json
from django.contrib.auth import get_user_model
from apps.accounts.roles import Role
from apps.accounts.services import user_set_role
from apps.gateway.asgi import HOLD_POLL_S
from apps.gateway.keys import key_create
from apps.gateway.models import OnDemand
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.runner import POLL_S
user = get_user_model().objects.create_user("bench")
user_set_role(user=user, role=Role.MEMBER)
recipe = Recipe.objects.get(slug={recipe!r})
host = Host.objects.create(name={host!r}, engine="process", simulated=True,
                           sim_time_scale={scale}, port_min={port}, port_max={port} + PORTS - 1)
OnDemand.objects.create(recipe=recipe).hosts.add(host)
print(json.dumps({{"key": key_create(user=user, name="bench")[1], "model": recipe.public_name,
                  "queue": host.queue, "recipe": recipe.pk, "host": host.pk,
                  "hold_poll_s": HOLD_POLL_S, "runner_poll_s": POLL_S}}))
"""

# The newest run of the recipe: its record, then stopped (a stop task on the host's queue:
# the runner stops its server) and waited for.
STOP = """
import json, time
from datetime import datetime
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from apps.runs.services import run_stop
run = Run.objects.filter(recipe_id={recipe}, host_id={host}).order_by("-created_at", "-pk").first()
out = {{"id": run.pk, "state": run.state, "created_at": run.created_at.isoformat(),
       "timings": run.timings, "port": run.port, "scale": run.facts.get("sim_time_scale"),
       "cold_ttft_s": run.cold_ttft_s, "warm_ttft_s": run.warm_ttft_s, "step": run.step}}
run_stop(run=run, reason="bench: next repeat")
deadline = time.monotonic() + 120
while Run.objects.get(pk=run.pk).state not in (RunState.STOPPED, RunState.FAILED):
    if time.monotonic() > deadline:
        raise SystemExit(f"run {{run.pk}} did not stop in 120 s")
    time.sleep(0.1)
shift = {shift!r}
if shift is not None:
    # The next load's speed: its server-paced phases (starting → ready) `shift` s shorter
    # than at the base speed, judged from this load's (host seconds = wall × its scale).
    first = min(datetime.fromisoformat(s["start"]) for s in run.timings.values())
    paced = (datetime.fromisoformat(run.timings["ready"]["start"]) - first).total_seconds()
    sim = paced * float(run.facts.get("sim_time_scale") or {base})
    out["next_scale"] = round(sim / (sim / {base} - shift), 3)
    Host.objects.filter(pk={host}).update(sim_time_scale=out["next_scale"])
print(json.dumps(out))
"""


class ReadyProbe(threading.Thread):
    """Asks the server's /metrics every PROBE_S s (not guarded by its key; 503 until its
    start-up is over) until it answers 200: `ready_at` is the midpoint between the last
    503 (or refused connection) and the first 200, ±PROBE_S/2 or so."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.done = threading.Event()
        self.ready_at: float | None = None
        self.probes = 0

    def run(self) -> None:
        last_no = time.monotonic()
        with httpx.Client(timeout=1, trust_env=False) as client:
            while not self.done.is_set():
                try:
                    status = client.get(self.url).status_code
                except httpx.HTTPError:
                    status = 0
                now = time.monotonic()
                self.probes += 1
                if status == 200:
                    self.ready_at = (last_no + now) / 2
                    return
                last_no = now
                self.done.wait(PROBE_S)


def ask(url: str, key: str, model: str, wait_s: int) -> dict:
    """One streamed chat completion that waits for the load: the send, each SSE comment,
    the response's head and the first text, on this process's monotonic clock."""
    body = {"model": model, "messages": PROMPT, "max_tokens": 8, "stream": True}
    headers = {"authorization": f"Bearer {key}", "x-sparkpanel-wait": str(wait_s)}
    comments: list[tuple[float, str]] = []
    first = head = response_id = None
    with httpx.Client(base_url=url, timeout=60, trust_env=False) as client:
        sent = time.monotonic()
        with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            head = time.monotonic()
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:300]!r}")
            for line in r.iter_lines():
                now = time.monotonic()
                if line.startswith(":"):
                    comments.append((now, line[1:].strip()))
                    continue
                if not line.startswith("data: {"):
                    continue
                payload = json.loads(line[6:])
                if "error" in payload:
                    raise RuntimeError(f"the panel answered an error: {payload['error']}")
                response_id = response_id or payload.get("id")
                for choice in payload.get("choices") or []:
                    delta = choice.get("delta") or {}
                    text = [delta.get(k) for k in ("content", "reasoning_content", "reasoning")]
                    if first is None and any(text):
                        first = now
    if first is None or response_id is None:
        raise RuntimeError("the stream ended without text")
    return {"sent": sent, "head": head, "first": first, "id": response_id,
            "comments": comments}  # fmt: skip


PORT_OF = """
from apps.runs.models import Run
print(Run.objects.filter(recipe_id={recipe}).order_by("-pk").first().port)
"""


def trace(port: int, response_id: str) -> dict:
    reply = httpx.get(f"http://127.0.0.1:{port}/sparksim/trace", params={"ids": response_id},
                      timeout=10, trust_env=False).json()  # fmt: skip
    if response_id not in reply.get("traces", {}):
        raise RuntimeError(f"sparksim has no trace for {response_id}")
    return reply["traces"][response_id]


def analyse(req: dict, run: dict, tr: dict, ready_at: float | None, offset: float,
            hold_poll_s: float) -> dict:  # fmt: skip
    """One repeat's terms, in seconds (module docstring)."""

    def mono(iso: str) -> float:
        return datetime.fromisoformat(iso).timestamp() - offset

    spans = run["timings"]
    created = mono(run["created_at"])
    first_phase = min(mono(s["start"]) for s in spans.values())
    warming, ready = mono(spans["warming"]["start"]), mono(spans["ready"]["start"])
    begun, written = tr["started_at"], tr["first_token_at"]
    gaps = [b[0] - a[0] for a, b in zip(req["comments"], req["comments"][1:], strict=False)]
    out = {
        "e2e": req["first"] - req["sent"],
        "phases": ready - created,
        "queued": first_phase - created,
        "start": warming - first_phase,
        "warm_up": ready - warming,
        "model_ttft": written - begun,
        "placement": created - req["sent"],
        "hold": begun - ready,
        "relay": req["first"] - written,
        "comments": len(req["comments"]),
        "comment_gap": statistics.median(gaps) if gaps else float("nan"),
        "head": req["head"] - req["sent"],
        "cold_ttft_sim_s": run["cold_ttft_s"],
        "run": run["id"],
        "scale": run["scale"],
    }
    if ready_at is not None:
        out["server_start"] = ready_at - first_phase  # process spawn + start-up phases
        out["runner_lag"] = warming - ready_at  # the runner's log poll, then its writes
    out["overhead"] = out["e2e"] - out["phases"] - out["model_ttft"]
    return out


def kill_servers(tmp: Path) -> None:
    """Model servers left running for this benchmark's runs (their meminfo file lies in its
    temp directory): a run's server lives in its own session, so stopping the worker does
    not end it. Each one found is ended by its pid."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "sparksim" in cmdline and str(tmp) in cmdline:
            try:
                proc.kill()
                proc.wait(timeout=10)
            except psutil.Error:
                pass


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def port_range() -> int:
    """The first of PORTS consecutive ports that are free now, below the kernel's ephemeral
    range (an outgoing connection's local port there could take one between the guess of
    `next_port` and the start)."""
    low = _ephemeral_low()
    for base in range(max(low - 4000, 10000), low - PORTS, PORTS):
        if all(_bindable(base + i) for i in range(PORTS)):
            return base
    raise RuntimeError(f"no {PORTS} consecutive free ports")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def next_port(base: int) -> int:
    """The port a start takes now: the range's first one that binds (runs.services._free_port)."""
    for port in range(base, base + PORTS):
        if _bindable(port):
            return port
    raise RuntimeError("every port of the range is taken")


def start_worker(stack: Stack, env: dict[str, str], queue: str, cpu: int) -> None:
    node = f"bench@{socket.gethostname()}"
    stack.start("worker", [*pin(cpu), sys.executable, "-m", "celery", "-A", "sparkpanel",
                "worker", "-Q", queue, "-n", node, "-c", "1", "--prefetch-multiplier", "1",
                "-l", "INFO", "--without-mingle", "--without-gossip"], env)  # fmt: skip
    log = stack.tmp / "worker.log"
    wait_until(lambda: f"{node} ready." in log.read_text(), 90, "the Celery worker", stack)


ROWS = [
    ("e2e", "**request → first token**"),
    ("phases", "**phases** (queued → ready, the run's own timings)"),
    ("queued", "· queued: the Celery hop to the host's worker, the runner's first steps"),
    ("start", "· starting → warming, as the runner saw it"),
    ("server_start", "  · sparksim's process and start-up, to its /metrics answering"),
    ("runner_lag", "  · the runner noticing it (log read every runner.POLL_S) and saving"),
    ("warm_up", "· warming → ready: the runner's warm-up requests (JIT included)"),
    ("model_ttft", "**model TTFT** (the request in sparksim: begun → first token written)"),
    ("overhead", "**overhead** = request → first token − phases − model TTFT"),
    ("placement", "· placement: send → the run row (admission, hold's first pass, request_load)"),
    ("hold", "· hold: ready → the request begun at sparksim (noticed, table, forward)"),
    ("relay", "· relay: first token written → received"),
]


def report(rows: list[dict], made: dict) -> str:
    scales = sorted({r["scale"] for r in rows})
    speed = f"×{scales[0]:g}" + (f"–×{scales[-1]:g}" if len(scales) > 1 else "")
    lines = [
        f"| term (wall s, sparksim {speed}) | median (min–max) |",
        "|---|---|",
    ]
    for key, label in ROWS:
        values = [r[key] for r in rows if key in r]
        if values:
            lines.append(f"| {label} | {med_range(values, '{:.3f}')} |")
    gaps = [r["comment_gap"] for r in rows if r["comment_gap"] == r["comment_gap"]]
    met = statistics.median(r["overhead"] for r in rows) <= TARGET_S
    worst = max(r["overhead"] for r in rows)
    lines += [
        "",
        f"{len(rows)} loads; progress comments per request "
        f"{med_range([r['comments'] for r in rows], '{:.0f}')}, "
        f"{'gap between them ' + med_range(gaps, '{:.2f}') + ' s' if gaps else 'no gaps'} "
        f"(HOLD_POLL_S = {made['hold_poll_s']:g} s, runner POLL_S = {made['runner_poll_s']:g} s).",
        f"Target overhead ≤ {TARGET_S:g} s: {'met' if met else 'MISSED'} at the median, "
        f"worst load {worst:.3f} s ({'within' if worst <= TARGET_S else 'over'}).",
        "",
        "| load | sim scale | request → first token | phases | model TTFT ms | overhead | "
        "placement | hold | relay ms | runner lag |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"| {i} | ×{r['scale']:g} | {r['e2e']:.2f} | {r['phases']:.2f} | "
            f"{1000 * r['model_ttft']:.1f} | **{r['overhead']:.3f}** | {r['placement']:.3f} | "
            f"{r['hold']:.3f} | {1000 * r['relay']:.1f} | "
            f"{r.get('runner_lag', float('nan')):.3f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="loads, each from nothing")
    parser.add_argument("--time-scale", type=float, default=10.0, help="the Spark's sim_time_scale")
    parser.add_argument(
        "--fixed-scale",
        action="store_true",
        help="every load at --time-scale (no sweep over the hold loop's grid)",
    )
    parser.add_argument("--wait", type=int, default=300, help="X-SparkPanel-Wait, seconds")
    parser.add_argument("--json", default=str(ROOT / "var" / "bench-ondemand-load.json"))
    args = parser.parse_args()
    with temp_stack("bench-ondemand-", one_at_a_time=True) as stack:
        try:
            env = panel_env(stack.tmp)
            env.pop("REDIS_URL", None)  # a private Redis: the Celery broker too
            start_redis(stack, env, cpu=0)
            manage(env, "migrate", "--noinput")
            base = port_range()
            code = SETUP.format(recipe=RECIPE, host=HOST, scale=args.time_scale, port=base,
                                ports=PORTS)  # fmt: skip
            made = json.loads(manage(env, "shell", "-c", code).strip().splitlines()[-1])
            start_worker(stack, env, made["queue"], cpu=1)
            _, url = start_web(stack, env, cpu=0)
            if pin(1):
                os.sched_setaffinity(0, {1})
            auth = {"authorization": f"Bearer {made['key']}"}
            # The panel as it runs: its key cache and route table filled by a first request.
            models = httpx.get(url + "/v1/models", headers=auth, timeout=30, trust_env=False)
            models.raise_for_status()
            pinned = "web/Redis on CPU 0, worker+sparksim/client on CPU 1" if pin(1) else "unpinned"
            print(f"on-demand load: {made['model']} on a simulated Spark at ×{args.time_scale:g}, "
                  f"{args.repeats} loads, streamed with X-SparkPanel-Wait; {pinned}; "
                  f"load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
            rows: list[dict] = []
            for rep in range(args.repeats):
                stack.check()
                port = next_port(base)  # the one the panel's placement will take
                probe = ReadyProbe(port)
                offset = time.time() - time.monotonic()
                probe.start()
                try:
                    req = ask(url, made["key"], made["model"], args.wait)
                finally:
                    probe.done.set()
                    probe.join(timeout=5)
                actual = int(manage(env, "shell", "-c", PORT_OF.format(
                    recipe=made["recipe"])).strip().splitlines()[-1])  # fmt: skip
                if actual != port:
                    raise RuntimeError(f"the run took port {actual}, not {port}: the readiness "
                                       "probe watched the wrong server")  # fmt: skip
                tr = trace(port, req["id"])
                shift = None  # the next load's phases this much shorter (the sweep)
                if rep + 1 < args.repeats and not args.fixed_scale:
                    shift = round(made["hold_poll_s"] * (rep + 1) / args.repeats, 3)
                stop = STOP.format(recipe=made["recipe"], host=made["host"], shift=shift,
                                   base=args.time_scale)  # fmt: skip
                run = json.loads(manage(env, "shell", "-c", stop).strip().splitlines()[-1])
                if run["state"] != "ready" or "ready" not in run["timings"]:
                    raise RuntimeError(f"run {run['id']} is {run['state']}: {run['step']}")
                if run["port"] != port:
                    raise RuntimeError(f"run {run['id']} took port {run['port']}, not {port}")
                row = analyse(req, run, tr, probe.ready_at, offset, made["hold_poll_s"])
                rows.append(row)
                print(f"  load {rep + 1}: request → first token {row['e2e']:.2f} s = phases "
                      f"{row['phases']:.2f} + model TTFT {row['model_ttft'] * 1000:.1f} ms + "
                      f"overhead {row['overhead']:.3f} s (placement {row['placement']:.3f}, "
                      f"hold {row['hold']:.3f}, relay {row['relay'] * 1000:.1f} ms); "
                      f"runner lag {row.get('runner_lag', float('nan')):.3f} s, "
                      f"{row['comments']} comments", flush=True)  # fmt: skip
            print()
            print(report(rows, made))
            out = {"time_scale": args.time_scale, "model": made["model"],
                   "hold_poll_s": made["hold_poll_s"], "runner_poll_s": made["runner_poll_s"],
                   "loads": rows}  # fmt: skip
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(out, indent=1))
            print(f"\nraw results: {args.json}")
        finally:
            kill_servers(stack.tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())

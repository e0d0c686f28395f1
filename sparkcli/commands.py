"""One function per command (`cmd_<name>(panel, args, io) -> exit code`) and the wait loop
that `wait` and `queue --wait` share."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from sparkcli.client import (
    ACTIVE_STATES,
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_TIMEOUT,
    Panel,
)
from sparkcli.compare import compare_context, compare_table, decode_check
from sparkcli.render import (
    Io,
    ProgressDisplay,
    duration,
    job_lines,
    percent_of,
    progress_text,
    table,
    write_text,
)


def cmd_whoami(panel: Panel, args, io: Io) -> int:
    me = panel.get("/me")
    if args.json:
        io.say(json.dumps(me, indent=2))
        return EXIT_OK
    io.say(f"{me['username']} ({me.get('role') or 'no role'}) at {panel.url}")
    if me.get("permissions"):
        io.say("can: " + ", ".join(me["permissions"]))
    return EXIT_OK


def cmd_queue(panel: Panel, args, io: Io) -> int:
    key = args.idempotency_key or str(uuid.uuid4())
    body = {"recipe": args.recipe, "host": args.host, "suite": args.suite, "note": args.note}
    response = panel.post("/jobs", body, headers={"Idempotency-Key": key})
    job = panel.json(response)
    if args.json:
        io.say(json.dumps(job, indent=2))
    else:
        io.say(str(job["id"]))
    if response.status_code == 200:  # a replay: this key already queued it
        io.note(f"{progress_text(job)} (already queued with this Idempotency-Key, not again)")
    else:
        io.note(progress_text(job))
    if not args.wait:
        return EXIT_OK
    return wait_for_job(panel, job["id"], timeout=args.timeout, interval=args.interval, io=io)


def cmd_status(panel: Panel, args, io: Io) -> int:
    if args.job_id is not None:
        job = panel.get(f"/jobs/{args.job_id}")
        io.say(json.dumps(job, indent=2) if args.json else "\n".join(job_lines(job)))
        return EXIT_OK
    params: dict[str, Any] = {"active": "true", "limit": 200}
    if args.host:
        params["host"] = args.host
    page = panel.get("/jobs", **params)
    jobs = page.get("items", [])
    if args.json:
        io.say(json.dumps(jobs, indent=2))
        return EXIT_OK
    if not jobs:
        io.say("No active jobs.")
        return EXIT_OK
    rows = []
    for job in sorted(jobs, key=lambda j: j["id"]):
        percent = percent_of(job)
        progress = job.get("progress") or {}
        rows.append(
            [
                str(job["id"]),
                job["state"],
                job["host"],
                job["recipe"],
                job["suite"],
                "" if percent is None else f"{percent:.0f} %",
                progress.get("step") or "",
            ]
        )
    io.say(table(rows, ["id", "state", "host", "recipe", "suite", "done", "step"]))
    if page.get("next_offset") is not None:
        io.say(f"… and {page['count'] - len(jobs)} more")
    return EXIT_OK


def wait_for_job(
    panel: Panel,
    job_id: int,
    *,
    timeout: float | None,
    interval: float,
    io: Io,
    display: ProgressDisplay | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    display = display or ProgressDisplay(io.err)
    deadline = clock() + timeout if timeout else None
    try:
        while True:
            job = panel.get(f"/jobs/{job_id}")
            display.update(job)
            if job["state"] not in ACTIVE_STATES:
                break
            if deadline is not None and clock() >= deadline:
                display.end()
                io.note(
                    f"timed out after {duration(timeout)}: job {job_id} is still {job['state']} "
                    f"(it keeps going; `sparkpanel cancel {job_id}` stops it)"
                )
                return EXIT_TIMEOUT
            pause = interval if deadline is None else min(interval, max(0.0, deadline - clock()))
            sleep(max(pause, 0.05))
    finally:
        display.end()
    state = job["state"]
    took = f" in {duration(job['duration_s'])}" if job.get("duration_s") is not None else ""
    if state == "done":
        io.note(f"job {job_id} done{took}")
        capacity = (job.get("summary") or {}).get("capacity_text")
        if capacity:
            io.note(capacity)
        return EXIT_OK
    io.note(f"job {job_id} {state}{took}" + (f": {job['error']}" if job.get("error") else ""))
    return EXIT_JOB_FAILED


def cmd_wait(panel: Panel, args, io: Io) -> int:
    code = wait_for_job(panel, args.job_id, timeout=args.timeout, interval=args.interval, io=io)
    if args.json:
        io.say(json.dumps(panel.get(f"/jobs/{args.job_id}"), indent=2))
    return code


def cmd_cancel(panel: Panel, args, io: Io) -> int:
    job = panel.json(panel.post(f"/jobs/{args.job_id}/cancel"))
    io.say(f"job {job['id']}: {job['state']}")
    return EXIT_OK


def cmd_results(panel: Panel, args, io: Io) -> int:
    if args.format == "csv":
        text = panel.get_text(f"/jobs/{args.job_id}/results.csv")
    else:
        data = panel.get(f"/jobs/{args.job_id}/results")
        if data.get("state") in ACTIVE_STATES:
            io.note(f"note: job {args.job_id} is still {data['state']}: partial results")
        text = json.dumps(data, indent=2)
    write_text(text, args.output, io)
    return EXIT_OK


def cmd_compare(panel: Panel, args, io: Io) -> int:
    ids = ",".join(str(i) for i in args.job_ids)
    jobs = panel.get("/jobs/compare", ids=ids, format="json")["jobs"]
    if args.format == "json":
        write_text(json.dumps({"jobs": jobs}, indent=2), args.output, io)
    elif args.format == "csv":
        write_text(panel.get_text("/jobs/compare", ids=ids, format="csv"), args.output, io)
    else:
        text = compare_table(jobs) + "\n\n" + "\n".join(compare_context(jobs))
        write_text(text, args.output, io)
    for job in jobs:
        if job.get("state") != "done":
            io.note(f"note: job {job.get('job')} is {job.get('state')}, not done")
    if args.max_decode_drop is None:
        return EXIT_OK
    check = decode_check(jobs, args.max_decode_drop)
    limit = f"{args.max_decode_drop:g} %"
    if check.ok:
        io.note(
            f"decode check passed: no median decode tok/s dropped more than {limit} "
            f"({check.compared} shared level{'s' if check.compared != 1 else ''} compared)"
        )
        return EXIT_OK
    for job in check.nothing_shared:
        io.note(
            f"decode check failed: job {job} shares no measured level with the baseline job "
            f"{jobs[0].get('job')}; nothing to compare"
        )
    if check.drops:
        io.note(
            f"decode check failed: median decode tok/s dropped more than {limit} "
            f"against the baseline job {jobs[0].get('job')}:"
        )
        for drop in check.drops:
            io.note(f"  {drop}")
    return EXIT_REGRESSION

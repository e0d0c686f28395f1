"""What a host's worker does for a run: start the server, follow its log into progress,
wait for readiness, warm it up, and stop it. The Celery tasks call these plain functions,
so tests can drive them directly too."""

from __future__ import annotations

import logging
import time

import httpx
from django.template.loader import render_to_string

from apps.core.events import BROADCAST_GROUP, fragment_push
from apps.hosts.engines import Engine, EngineError, Handle, LaunchSpec, engine_for
from apps.hosts.engines.base import State
from apps.runs.logparse import LogFollower, Phase
from apps.runs.models import TRANSITIONS, InvalidTransition, Run, RunState

log = logging.getLogger(__name__)
S = RunState
POLL_S = 0.25
PUSH_EVERY_S = 0.5
# Generous limits per phase, in real seconds on a Spark (a first load can take 15 minutes);
# a simulated host divides them by its time scale.
PHASE_TIMEOUT_S = {S.STARTING: 600, S.LOADING: 1800, S.COMPILING: 1200, S.WARMING: 600}
WARMUP_MAX_REQUESTS = 6
PHASE_STATE = {Phase.LOADING: S.LOADING, Phase.COMPILING: S.COMPILING}


class StopRequested(Exception):
    """Someone asked the run to stop while it was starting."""


class StartFailed(Exception):
    def __init__(self, reason: str, *, advice: str = "", log_lines: list[str] | None = None):
        super().__init__(reason)
        self.reason, self.advice, self.log_lines = reason, advice, log_lines or []


class _Pusher:
    """Live progress for every open page; best effort and throttled."""

    def __init__(self, run: Run):
        self.run = run
        self.last = 0.0

    def push(self, *, force: bool = False, lines: list[str] | None = None) -> None:
        now = time.monotonic()
        if not (force or lines) and now - self.last < PUSH_EVERY_S:
            return
        self.last = now
        html = render_to_string("runs/partials/progress.html", {"run": self.run})
        if force:  # phase changes: the facts and timings panel too
            html += render_to_string("runs/partials/details.html", {"run": self.run})
        if lines:
            html += render_to_string(
                "runs/partials/log_lines.html", {"run": self.run, "lines": lines}
            )
        fragment_push(group=BROADCAST_GROUP, html=html)


def _local(url: str) -> str:
    return url.replace("//0.0.0.0:", "//127.0.0.1:")


def _scaled(run: Run, seconds: float) -> float:
    return seconds / run.host.sim_time_scale if run.host.simulated else seconds


def _save(run: Run, **fields) -> None:
    Run.objects.filter(pk=run.pk).update(**fields)
    for key, value in fields.items():
        setattr(run, key, value)


def _check_stop(run: Run) -> None:
    if Run.objects.filter(pk=run.pk).values_list("state", flat=True).first() == S.STOPPING:
        run.state = S.STOPPING
        raise StopRequested


def start(run_id: int) -> None:
    run = Run.objects.select_related("host", "recipe").get(pk=run_id)
    if run.state == S.STOPPING and not run.handle:
        run.transition(S.STOPPED, step="Stopped before it started")
        return
    if run.state not in (S.QUEUED, S.STARTING, S.LOADING, S.COMPILING, S.WARMING):
        log.info("run %s is %s: nothing to start", run.pk, run.state)
        return
    pusher = _Pusher(run)
    engine: Engine | None = None
    handle: Handle | None = None
    try:
        engine = engine_for(run.host)
        if run.state == S.QUEUED:
            run.transition(S.STARTING, step="Starting the server", percent=0)
            pusher.push(force=True)
        spec = LaunchSpec(run_id=run.pk, host_name=run.host.name, argv=list(run.argv),
                          image=run.image, port=run.port)  # fmt: skip
        handle = engine.start(spec)  # a redelivered task gets the server already running
        _save(run, handle=str(handle))
        if run.state != S.WARMING:
            _follow(run, engine, handle, pusher)
        _warm_up(run, pusher)
        run.transition(S.READY, step="Ready", percent=100)
        pusher.push(force=True)
    except StopRequested:
        stop(run.pk)
    except (StartFailed, EngineError, httpx.HTTPError) as exc:
        if (
            engine is not None
            and handle is not None
            and engine.status(handle).state is State.RUNNING
        ):
            engine.stop(handle, timeout=10)
        if isinstance(exc, StartFailed):
            _fail(run, exc.reason, pusher, advice=exc.advice, log_lines=exc.log_lines)
        elif isinstance(exc, httpx.HTTPError):
            _fail(run, f"the warm-up request failed: {exc}", pusher)
        else:
            _fail(run, str(exc), pusher)
    except InvalidTransition as exc:
        log.warning("%s", exc)


def _follow(run: Run, engine: Engine, handle: Handle, pusher: _Pusher) -> None:
    follower = LogFollower()
    cursor = 0  # re-read from the start: the follower rebuilds its state
    phase_started = time.monotonic()
    models_ok_since: float | None = None
    while True:
        _check_stop(run)
        lines, cursor = engine.read_logs(handle, cursor)
        for line in lines:
            follower.feed(line)
        if follower.error is not None:
            raise StartFailed(
                follower.error.error, advice=follower.error.advice, log_lines=follower.tail()
            )
        target = PHASE_STATE.get(follower.phase)
        if target and run.state != target and target in TRANSITIONS[run.state]:
            run.transition(target)
            phase_started = time.monotonic()
        fields = {"percent": round(follower.percent, 1), "step": follower.step or run.step,
                  "facts": {**run.facts, **follower.facts}, "log_cursor": cursor}  # fmt: skip
        if any(getattr(run, key) != value for key, value in fields.items()):
            _save(run, **fields)
        pusher.push(lines=lines or None)
        # Ready when the log says so; /v1/models answering is the fallback for servers
        # whose log line never comes (it may also be a moment early: give the log 2 s).
        if not follower.ready and models_ok_since is None and _models_ready(run):
            models_ok_since = time.monotonic()
        if follower.ready or (models_ok_since and time.monotonic() - models_ok_since > 2):
            run.transition(
                S.WARMING, step="Warming up: the first request compiles kernels", percent=0
            )
            pusher.push(force=True)
            return
        status = engine.status(handle)
        if status.state is not State.RUNNING:
            lines, cursor = engine.read_logs(handle, cursor)
            for line in lines:
                follower.feed(line)
            if follower.error is not None:
                raise StartFailed(
                    follower.error.error, advice=follower.error.advice, log_lines=follower.tail()
                )
            code = "unknown" if status.exit_code is None else status.exit_code
            raise StartFailed(
                f"the server exited with code {code} while {run.get_state_display().lower()}",
                log_lines=follower.tail(),
            )
        if time.monotonic() - phase_started > _scaled(run, PHASE_TIMEOUT_S.get(run.state, 1800)):
            raise StartFailed(
                f"timed out while {run.get_state_display().lower()}", log_lines=follower.tail()
            )
        time.sleep(POLL_S)


def _models_ready(run: Run) -> bool:
    try:
        return httpx.get(_local(run.endpoint) + "/v1/models", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _warm_up(run: Run, pusher: _Pusher) -> None:
    """Tiny requests until the time to first token settles: the first after a start pays
    the JIT compile (~25 s on Nemotron-3-Super), so a run is ready only after it."""
    body = {
        "model": run.served_name,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 2,
    }
    ttfts: list[float] = []
    scale = run.host.sim_time_scale if run.host.simulated else 1.0
    deadline = time.monotonic() + _scaled(run, PHASE_TIMEOUT_S[S.WARMING])
    with httpx.Client(base_url=_local(run.endpoint), timeout=max(_scaled(run, 300), 10)) as client:
        for i in range(WARMUP_MAX_REQUESTS):
            _check_stop(run)
            t0 = time.monotonic()
            client.post("/v1/chat/completions", json=body).raise_for_status()
            ttfts.append((time.monotonic() - t0) * scale)  # simulated seconds, like the server
            _save(
                run,
                step=f"Warm-up request {i + 1}: {ttfts[-1]:.2f} s",
                percent=min(100, 25 * (i + 1)),
            )
            pusher.push(force=True)
            settled = len(ttfts) >= 3 and abs(ttfts[-1] - ttfts[-2]) <= 0.2 * ttfts[-2]
            if settled or time.monotonic() > deadline:
                break
    _save(run, cold_ttft_s=ttfts[0], warm_ttft_s=ttfts[-1])


def _fail(
    run: Run, reason: str, pusher: _Pusher, *, advice: str = "", log_lines: list[str] | None = None
) -> None:
    run.refresh_from_db()
    if run.state in (S.FAILED, S.STOPPED):
        return
    run.mark_failed(reason, advice=advice, log="\n".join(log_lines or []))
    pusher.push(force=True)


def stop(run_id: int) -> None:
    run = Run.objects.select_related("host", "recipe").get(pk=run_id)
    if run.state in (S.STOPPED, S.FAILED):
        return
    if run.state != S.STOPPING:
        run.transition(S.STOPPING, step="Stopping")
    pusher = _Pusher(run)
    pusher.push(force=True)
    if run.handle:
        engine = engine_for(run.host)
        handle = Handle.parse(run.handle)
        engine.stop(handle, timeout=30)
        engine.remove(handle)
    run.transition(S.STOPPED, step="Stopped", percent=0)
    pusher.push(force=True)


def reconcile(host_id: int) -> list[int]:
    """Compare the host's active runs with its servers: a run whose server is gone is
    marked failed with the last log lines (a crash, an OOM kill, a stop from outside).
    Runs still starting are left to their start task, which a restarted worker resumes."""
    from apps.hosts.models import Host

    host = Host.objects.get(pk=host_id)
    failed = []
    engine = engine_for(host)
    for run in Run.objects.active().filter(host=host, state=S.READY).exclude(handle=""):
        handle = Handle.parse(run.handle)
        status = engine.status(handle)
        if status.state is State.RUNNING:
            continue
        lines, _ = engine.read_logs(handle, 0)
        code = "unknown" if status.exit_code is None else status.exit_code
        _fail(
            run,
            f"the server exited with code {code} while ready",
            _Pusher(run),
            log_lines=lines[-40:],
        )
        engine.remove(handle)
        failed.append(run.pk)
    return failed

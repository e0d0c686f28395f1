"""What a host's worker does for a run: start the server, follow its log into progress,
wait for readiness, warm it up, and stop it. The Celery tasks call these plain functions,
so tests can drive them directly too."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections import deque
from datetime import timedelta

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from apps.audit import services as audit
from apps.core.tls import client_context
from apps.hosts.clock import record_run_clock, run_clock
from apps.hosts.engines import Engine, EngineError, Handle, LaunchSpec, engine_for
from apps.hosts.engines.base import State
from apps.hosts.models import Host
from apps.runs import pair, weights
from apps.runs.calibration import plan_check_record
from apps.runs.live import PUSH_EVERY_S, RunPusher
from apps.runs.models import STARTING_STATES, TRANSITIONS, InvalidTransition, Run, RunState
from apps.runs.mods import ModRefused, bundles_for
from apps.runs.pair import PairFailed
from apps.runs.services import RunRefused, recipe_environment, run_start
from apps.runs.signals import host_worker_free
from hf_adapter.transfer import DownloadStopped
from sparkdomain import options
from sparkdomain.bounded import clip
from sparkdomain.spark import GB
from vllm_adapter import endpoints
from vllm_adapter.logparse import LogFollower, Phase

log = logging.getLogger(__name__)
S = RunState
POLL_S = 0.25
# Generous limits per phase, in real seconds on a Spark (a first load can take 15 minutes);
# a simulated host divides them by its time scale.
PHASE_TIMEOUT_S = {S.STARTING: 600, S.LOADING: 1800, S.COMPILING: 1200, S.WARMING: 600}
WARMUP_MAX_REQUESTS = 6
LOG_TAIL_LINES = 200
PHASE_STATE = {Phase.LOADING: S.LOADING, Phase.COMPILING: S.COMPILING}
CACHE_SCAN_EVERY = timedelta(minutes=10)


class StopRequested(Exception):
    """Someone asked the run to stop while it was starting."""


class StartFailed(Exception):
    def __init__(self, reason: str, *, advice: str = "", log_lines: list[str] | None = None):
        super().__init__(reason)
        self.reason, self.advice, self.log_lines = reason, advice, log_lines or []


def _scaled(run: Run, seconds: float) -> float:
    """Host seconds (a limit on a real Spark) as wall seconds on this run's host."""
    return run_clock(run).wall_seconds(seconds)


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
    if run.state not in STARTING_STATES:
        log.info("run %s is %s: nothing to start", run.pk, run.state)
        return
    pusher = RunPusher(run)
    engine: Engine | None = None
    handle: Handle | None = None
    try:
        engine = engine_for(run.host)
        record_run_clock(run)  # the speed this server starts with (apps/hosts/clock.py)
        spec = LaunchSpec(run_id=run.pk, host_name=run.host.name, argv=list(run.argv),
                          image=run.image, port=run.port,
                          # sparksim computes memory from what the planner did
                          checkpoint=dataclasses.asdict(run.recipe.architecture()),
                          host_facts=dataclasses.asdict(run.host.spec()))  # fmt: skip
        if run.is_pair and run.state in (S.QUEUED, S.PULLING) and not run.peer_state:
            pair.ask_to_join(run)  # the worker Spark downloads its copy meanwhile
        if run.state in (S.QUEUED, S.PULLING) and engine.needs_pull(spec):
            _pull(run, engine, spec, pusher)
        if run.state in (S.QUEUED, S.PULLING, S.DOWNLOADING):
            _download(run, pusher)
            spec = dataclasses.replace(spec, argv=list(run.argv))  # pinned to its commit
        # The recipe's variables that only tune vLLM (sparkdomain/env_rules.py, judged again
        # here); the panel's own — the worker's VLLM_ENV, the key, offline mode — win.
        spec.env.update(recipe_environment(run.recipe))
        if run.api_key:
            # vLLM's --api-key, through the environment: never in the argv, the log or
            # the page. Only the panel (the gateway, its own probes) knows it.
            spec.env["VLLM_API_KEY"] = run.api_key
        if (run.facts.get("weights") or {}).get("by") == "panel":
            spec.env["HF_HUB_OFFLINE"] = "1"  # vLLM never downloads behind the panel's back
        if run.state in (S.QUEUED, S.PULLING, S.DOWNLOADING):
            run.transition(S.STARTING, step="Starting the server", percent=0)
            pusher.push(force=True)
        if run.is_pair:
            # Two Sparks: the Ray cluster first (each side's worker starts its node), then
            # the server on the head joins it (apps/runs/pair.py).
            if run.state == S.STARTING and not run.handle:
                pair.form_cluster(run, engine, pusher, _check_stop)
                _save(run, step="Starting the server on the pair's head")
            spec = dataclasses.replace(
                spec,
                pair=True,
                env={**spec.env, **pair.server_env(run)},
                ray_temp_dir=pair.server_temp_dir(run),
                ray_node_ref=pair.head_node_ref(run),
            )
        run.record_image(engine.image_identity(spec))  # a tag moves; its digest does not
        if not run.handle:
            spec = _with_mods(run, spec, pusher)
            _drop_page_cache(run, pusher)
        handle = engine.start(spec)  # a redelivered task gets the server already running
        _save(run, handle=str(handle))
        if run.state != S.WARMING:
            _follow(run, engine, handle, pusher)
        _warm_up(run, pusher)
        run.transition(S.READY, step="Ready", percent=100)
        plan_check_record(run=run)  # what vLLM measured beside what the planner predicted
        pusher.push(force=True)
    except StopRequested:
        stop(run.pk)
    except (StartFailed, PairFailed, EngineError, httpx.HTTPError) as exc:
        log_lines = exc.log_lines if isinstance(exc, StartFailed | PairFailed) else []
        if engine is not None and handle is not None:
            with contextlib.suppress(EngineError):
                if not log_lines:
                    log_lines = engine.tail(handle, 40)
                if engine.status(handle).state is State.RUNNING:
                    engine.stop(handle, timeout=10)
                engine.remove(handle)  # its log lines are kept on the run
        if run.is_pair and engine is not None:
            run.refresh_from_db()
            pair.teardown(run, engine)  # both sides' Ray nodes: nothing left running
        if isinstance(exc, StartFailed | PairFailed):
            reason = pair.name_the_side(run, exc.reason, log_lines) if run.is_pair else exc.reason
            _fail(run, reason, pusher, advice=exc.advice, log_lines=log_lines)
        elif isinstance(exc, httpx.HTTPError):
            _fail(run, f"the warm-up request failed: {exc}", pusher, log_lines=log_lines)
        else:
            _fail(run, str(exc), pusher, log_lines=log_lines)
    except InvalidTransition as exc:
        log.warning("%s", exc)


def _drop_page_cache(run: Run, pusher: RunPusher) -> None:
    """NVIDIA's advice for a GB10, where vLLM's start gate reads MemAvailable: sync, then
    drop the page cache (only where the host's admin asked for it; audited). A failure is
    noted on the run, never fatal: vLLM's own gate still decides."""
    if not run.host.drop_page_cache:
        return
    _save(run, step="Dropping the page cache before the start")
    pusher.push(force=True)
    try:
        os.sync()
        with open(settings.DROP_CACHES_PATH, "w") as proc:
            proc.write("3\n")
        outcome = "dropped"
    except OSError as exc:
        outcome = f"not dropped: {exc.strerror or exc}"
    audit.record("host.drop_caches", run.host, after={"run": run.pk, "outcome": outcome},
                 message=f"page cache {outcome} before run {run.pk}")  # fmt: skip
    _save(run, facts={**run.facts, "page_cache": outcome})


def _with_mods(run: Run, spec: LaunchSpec, pusher: RunPusher) -> LaunchSpec:
    """The recipe's reviewed mods, judged again now (an approval taken back since the
    admission stops the start), recorded on the run, and shown while they are applied."""
    try:
        bundles = bundles_for(run.recipe, run.host, pair=run.is_pair)
    except ModRefused as exc:
        raise StartFailed(str(exc)) from None
    if not bundles:
        return spec
    names = ", ".join(b.name for b in bundles)
    facts = {**run.facts, "mods": [{"name": b.name, "digest": b.digest} for b in bundles]}
    _save(run, facts=facts, step=clip(f"Applying mods to the image: {names} (once per image)", 200))
    pusher.push(force=True)
    return dataclasses.replace(spec, mods=tuple(bundles))


def _size(n: int) -> str:
    return f"{n / GB:.2f} GB" if n >= GB else f"{n / 1e6:.1f} MB"


def _pull(run: Run, engine: Engine, spec: LaunchSpec, pusher: RunPusher) -> None:
    """Pull the image with live progress (layers and bytes); a stop ends the pull."""
    if run.state == S.QUEUED:
        run.transition(S.PULLING, step=f"Pulling {engine.image_for(spec)}", percent=0)
        pusher.push(force=True)
    last_save = 0.0
    stop_seen = False

    def progress(p) -> None:
        nonlocal last_save
        now = time.monotonic()
        if now - last_save < PUSH_EVERY_S and p.layers_done < p.layers:
            return
        last_save = now
        size = f"{_size(p.bytes_done)} of {_size(p.bytes_total)}" if p.bytes_total else ""
        if not p.layers:
            step = f"Pulling: {p.status or 'resolving the image'}"
        else:
            step = f"Pulling: {p.layers_done}/{p.layers} layers" + (f", {size}" if size else "")
        _save(run, step=step, percent=round(p.percent, 1))
        pusher.push()

    def should_stop() -> bool:
        nonlocal stop_seen
        if time.monotonic() - last_save >= PUSH_EVERY_S or not stop_seen:
            state = Run.objects.filter(pk=run.pk).values_list("state", flat=True).first()
            stop_seen = state == S.STOPPING
        return stop_seen

    try:
        engine.pull(spec, progress=progress, should_stop=should_stop)
    except EngineError as exc:
        raise StartFailed(
            str(exc),
            advice="Check the image name and tag, and that this Spark can reach the registry "
            "(`docker pull` on the Spark shows the same error).",
        ) from None
    _check_stop(run)


def _download(run: Run, pusher: RunPusher) -> None:
    """The recipe's weights into the host's cache before the start, with live progress
    (apps/runs/weights.py); the run then serves exactly the commit it downloaded. Without a
    cache on the host, or for a local path, vLLM reads the model itself (said on the page)."""
    recipe, host = run.recipe, run.host
    why_not = host.weights_not_downloaded(recipe.model_id)
    if why_not is not None:
        _save(run, facts={**run.facts, "weights": {"by": "vllm", "why": why_not}})
        return
    if run.state != S.DOWNLOADING:
        run.transition(S.DOWNLOADING, step=f"Downloading {recipe.model_id}: planning", percent=0)
        pusher.push(force=True)
    last_check = 0.0
    stop_seen = False

    def progress(report: dict) -> None:
        step, percent = weights.progress_line(report)
        _save(run, step=step[:200], percent=percent if report.get("total_bytes") else run.percent,
              facts={**run.facts, "download": report})  # fmt: skip
        pusher.push()

    def should_stop() -> bool:
        nonlocal last_check, stop_seen
        if not stop_seen and time.monotonic() - last_check >= PUSH_EVERY_S:
            last_check = time.monotonic()
            state = Run.objects.filter(pk=run.pk).values_list("state", flat=True).first()
            stop_seen = state == S.STOPPING
        return stop_seen

    try:
        fetched = weights.fetch(host, recipe.model_id, recipe.revision, on_progress=progress,
                                should_stop=should_stop)  # fmt: skip
    except DownloadStopped:
        run.state = S.STOPPING
        raise StopRequested from None
    except weights.WeightsFailed as exc:
        raise StartFailed(exc.reason, advice=exc.advice) from None
    facts = {k: v for k, v in run.facts.items() if k != "download"}
    facts["weights"] = fetched.as_facts()
    _save(run, facts=facts, argv=weights.pinned_argv(list(run.argv), fetched.commit))
    weights.scan(host)  # the Hosts page shows what the download added
    _check_stop(run)


def _follow(run: Run, engine: Engine, handle: Handle, pusher: RunPusher) -> None:
    follower = LogFollower()
    cursor = 0  # re-read from the start: the follower rebuilds its state
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    phase_started = time.monotonic()
    models_ok_since: float | None = None
    while True:
        _check_stop(run)
        lines, cursor = _read_into(follower, engine, handle, cursor)
        target = PHASE_STATE.get(follower.phase)
        if target and run.state != target and target in TRANSITIONS[run.state]:
            run.transition(target)
            phase_started = time.monotonic()
        fields = {"percent": round(follower.percent, 1), "step": follower.step or run.step,
                  "facts": {**run.facts, **follower.facts}, "log_cursor": cursor}  # fmt: skip
        if lines:
            tail.extend(lines)
            fields["log_tail"] = "\n".join(tail)
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
            _read_into(follower, engine, handle, cursor)  # its last words may say why
            # No error line named a cause; a warning may have (PyTorch's sm_121 one).
            raise StartFailed(
                f"{status.describe()} while {run.get_state_display().lower()}",
                advice=follower.warning.advice if follower.warning else "",
                log_lines=follower.tail(),
            )
        if time.monotonic() - phase_started > _scaled(run, PHASE_TIMEOUT_S.get(run.state, 1800)):
            raise StartFailed(
                f"timed out while {run.get_state_display().lower()}", log_lines=follower.tail()
            )
        time.sleep(POLL_S)


def _read_into(
    follower: LogFollower, engine: Engine, handle: Handle, cursor: int
) -> tuple[list[str], int]:
    """Feed the new log lines to the follower; a recognised vLLM error fails the start."""
    lines, cursor = engine.read_logs(handle, cursor)
    for line in lines:
        follower.feed(line)
    if follower.error is not None:
        raise StartFailed(
            follower.error.error, advice=follower.error.advice, log_lines=follower.tail()
        )
    return lines, cursor


def _models_ready(run: Run) -> bool:
    try:
        url = endpoints.url(run.local_endpoint, endpoints.MODELS)
        return (
            httpx.get(
                url, headers=run.upstream_headers, timeout=1, verify=client_context()
            ).status_code
            == 200
        )
    except httpx.HTTPError:
        return False


def _pooling(argv: list[str]) -> bool:
    """A server vLLM runs as a pooling model (embeddings, scores): `--runner pooling`, or a
    generative checkpoint converted with `--convert embed|classify`. It has no chat API."""
    return any(
        (flag == "--runner" and value == "pooling")
        or (flag == "--convert" and value in ("embed", "classify"))
        for flag, value in options.given(argv)
    )


def _warm_up(run: Run, pusher: RunPusher) -> None:
    """Tiny requests until the time to first token settles: the first after a start pays
    the JIT compile (~25 s on Nemotron-3-Super), so a run is ready only after it. A pooling
    model is warmed up with an embedding (it has no chat API)."""
    if _pooling(list(run.argv or [])):
        path, body = "/v1/embeddings", {"model": run.served_name, "input": "Hi"}
    else:
        path = endpoints.CHAT_COMPLETIONS
        body = endpoints.chat_body(
            run.served_name, [{"role": "user", "content": "Hi"}], max_tokens=2
        )
    ttfts: list[float] = []
    clock = run_clock(run)
    deadline = time.monotonic() + _scaled(run, PHASE_TIMEOUT_S[S.WARMING])
    timeout = max(_scaled(run, 300), 10)
    with httpx.Client(
        base_url=run.local_endpoint, headers=run.upstream_headers, timeout=timeout
    ) as client:
        for i in range(WARMUP_MAX_REQUESTS):
            _check_stop(run)
            t0 = time.monotonic()
            client.post(path, json=body).raise_for_status()
            ttfts.append(clock.host_seconds(time.monotonic() - t0))  # host time, like its log
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
    run: Run,
    reason: str,
    pusher: RunPusher,
    *,
    advice: str = "",
    log_lines: list[str] | None = None,
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
    pusher = RunPusher(run)
    pusher.push(force=True)
    engine = engine_for(run.host)
    if run.handle:
        handle = Handle.parse(run.handle)
        engine.stop(handle, timeout=30)
        engine.remove(handle)
    if run.is_pair:
        pair.teardown(run, engine)  # the head's Ray node here, the worker's on its queue
    run.transition(S.STOPPED, step="Stopped", percent=0)
    pusher.push(force=True)


def restart(run_id: int, user_id: int | None) -> int | None:
    """Stop the run, then start its recipe again on the same host as a new run (on the
    host's queue, so the old server is gone before the new one is admitted). `user_id`
    None: the panel restarts it (the guard's hang policy), for whoever started it."""
    stop(run_id)
    old = Run.objects.select_related("host", "recipe", "started_by").get(pk=run_id)
    # The panel's own restart (the guard's, for a hung run) is made for whoever started
    # the run: their admission, their override of a "does not fit" included.
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else old.started_by
    try:
        new = run_start(recipe=old.recipe, host=old.host, user=user, restart_of=old)
    except RunRefused as exc:
        _save(old, step=f"Restart refused: {exc}"[:200])
        RunPusher(old).push(force=True)
        return None
    return new.pk


def reconcile(host_id: int) -> list[int]:
    """Compare the host's runs with its servers, on the host's own queue (so no start task
    of this host is running meanwhile):

    - a ready run whose server is gone (a crash, an OOM kill, a stop from outside) is marked
      failed with the exit code and the last log lines;
    - a run caught half-started (its worker died mid-start) is resumed: its server, if still
      there, is adopted and followed to ready — never started a second time;
    - servers the panel started for runs that are over are stopped and removed;
    - what else runs on the host (unmanaged containers) is recorded for the host page.

    Returns the runs it marked failed.
    """
    host = Host.objects.get(pk=host_id)
    failed = []
    engine = engine_for(host)
    for run in Run.objects.filter(host=host, state=S.READY).exclude(handle=""):
        handle = Handle.parse(run.handle)
        status = engine.status(handle)
        if status.state is State.RUNNING:
            continue
        lines = engine.tail(handle, LOG_TAIL_LINES)
        reason, advice = _why_it_ended(f"{status.describe()} while ready", lines)
        if run.is_pair:
            reason = pair.name_the_side(run, reason, lines)
        _fail(run, reason, RunPusher(run), advice=advice, log_lines=lines[-40:])
        engine.remove(handle)
        if run.is_pair:
            run.refresh_from_db()
            pair.teardown(run, engine)
        failed.append(run.pk)
    for run in Run.objects.filter(host=host, state__in=STARTING_STATES).exclude(state=S.QUEUED):
        log.warning("run %s was left %s by a worker that died: resuming it", run.pk, run.state)
        start(run.pk)
        if Run.objects.filter(pk=run.pk, state=S.FAILED).exists():
            failed.append(run.pk)
    _sweep(host, engine)
    if host.hf_cache_path and (
        host.weights_cache_at is None or timezone.now() - host.weights_cache_at > CACHE_SCAN_EVERY
    ):
        weights.scan(host)  # what the Hosts page shows of its cache, at most this old
    # Nothing else runs on this queue now: jobs marked running here lost their worker
    # (the benchmarks app interrupts them, results kept).
    host_worker_free.send(sender=Host, host=host)
    return failed


def _why_it_ended(reason: str, lines: list[str]) -> tuple[str, str]:
    """A ready server that went away unasked: vLLM's own error line from its last log lines
    (real vLLM exits with code 0 after its engine died), with advice, when one names it."""
    follower = LogFollower()
    for line in lines:
        follower.feed(line)
    if follower.error is None:
        return reason, follower.warning.advice if follower.warning else ""
    return f"{reason}: {follower.error.error}", follower.error.advice


def _sweep(host, engine: Engine) -> None:
    """Stop leftovers of finished runs; record what the panel did not start."""
    finished = set(
        Run.objects.on(host).filter(state__in=[S.STOPPED, S.FAILED]).values_list("pk", flat=True)
    )
    for item in engine.list_managed():
        if item.run_id in finished:
            log.warning("removing the leftover server of run %s on %s", item.run_id, host.name)
            if item.status.state is State.RUNNING:
                engine.stop(item.handle, timeout=30)
            engine.remove(item.handle)
    try:
        unmanaged, error = engine.list_unmanaged(), ""
    except EngineError as exc:
        unmanaged, error = [], str(exc)[:300]
    Host.objects.filter(pk=host.pk).update(
        unmanaged=unmanaged, inventory_at=timezone.now(), inventory_error=error
    )

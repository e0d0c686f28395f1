"""A pair run's two halves: tensor parallel 2 over two Sparks on a Ray cluster, each side
done by that Spark's own worker on its own queue (docs/two-sparks.md).

- The head's worker (`runner.start` calls `form_cluster`): starts the head's Ray node, asks
  the worker Spark's queue to join (`runs.pair_join`), and waits until the probe — run in
  the head node's own environment — sees both Sparks' nodes alive at their link addresses
  with a GPU each. Only then does `runner.start` start `vllm serve` on the head, joined to
  that cluster (RAY_ADDRESS), and follow its log as for one Spark.
- The worker Spark's worker (`join`): starts its Ray node and watches it while the run
  starts; if the node dies (Ray's version differs, the head cannot be reached) it reports
  the step, Ray's own lines and advice in `Run.peer_state`, which only it writes.
- Teardown (`teardown`, from the head's worker, the watchdog or reconcile): the head's
  server and Ray node are stopped here, the worker Spark's node by `runs.pair_leave` on
  its own queue (`leave`). A failure names the side, the step, its log lines and advice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

from celery import current_app
from django.conf import settings

from apps.hosts.engines import Engine, EngineError, Handle, engine_for
from apps.hosts.engines.base import SPARKSIM_HOST, RayNodeSpec, State
from apps.hosts.models import Host, SparkPair
from apps.runs import weights
from apps.runs.models import STARTING_STATES, Run, RunState
from hf_adapter.transfer import DownloadStopped
from ray_adapter import link as ray_link
from ray_adapter import nodes as ray_nodes
from ray_adapter import probe as ray_probe
from sparksim.facts import NODE_FAULTS_ENV, NODE_MEMINFO_ENV

log = logging.getLogger(__name__)
S = RunState
# Wall seconds (Ray's start is real, not simulated): two `ray start`s and a probe take
# ~15 s here; a real pair's first start may wait for the images.
JOIN_TIMEOUT_S = 240
PROBE_EVERY_S = 2.0
# How long a head whose Ray node exited waits for the worker Spark's own report: a worker
# that cannot join (another Ray version) can take the head's node down with it.
PEER_REPORT_GRACE_S = 10.0
WATCH_EVERY_S = 1.0
LOG_LINES = 40
# The Ray ports a simulated pair's two nodes (one machine) must not share.
SIM_PORTS = ("dashboard_port", "dashboard_agent_listen_port", "dashboard_agent_grpc_port",
             "runtime_env_agent_port", "metrics_export_port")  # fmt: skip


class PairFailed(Exception):
    """One side of the pair failed; the message names it and the step."""

    def __init__(self, reason: str, *, advice: str = "", log_lines: list[str] | None = None):
        super().__init__(reason)
        self.reason, self.advice, self.log_lines = reason, advice, log_lines or []


def pair_of_run(run: Run) -> SparkPair:
    pair = SparkPair.objects.select_related("head", "worker").filter(head=run.host).first()
    if pair is None or pair.worker_id != run.peer_host_id:
        raise PairFailed(
            f"{run.host.name} and {run.peer_host.name} are no longer linked as a pair",
            advice="An admin changed the pairs while the run started: start it again.",
        )
    return pair


def _temp_path(run: Run, host: Host) -> Path:
    # This panel's own (two panels, or two test sessions, on one machine count runs alike).
    panel = hashlib.sha256(str(settings.VAR_DIR).encode()).hexdigest()[:8]
    # short: Ray's unix sockets live under it (108 bytes at most), so the name is cut
    return Path(tempfile.gettempdir()) / f"sparkpanel-ray-{panel}-{run.pk}-{host.name[:16]}"


def drop_temp_dir(run: Run, host: Host) -> None:
    """A stopped simulated node's session files go with it."""
    if host.simulated:
        shutil.rmtree(_temp_path(run, host), ignore_errors=True)


def ray_temp_dir(run: Run, host: Host) -> str:
    """A simulated Spark's Ray session directory for this run: short (Ray's unix sockets
    live under it, 108 bytes at most), private (0700, ours, not a link), and known to both
    the node and, on the head, the API server that joins it (a container mounts it)."""
    path = _temp_path(run, host)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PairFailed(f"{path} is not a directory of this worker's own: refusing to use it")
    path.chmod(0o700)
    return str(path)


def node_spec(run: Run, host: Host, pair: SparkPair) -> RayNodeSpec:
    """This Spark's side of the run's Ray cluster. A simulated Spark's node is small (one
    CPU, the least object store), takes its own ports (both sides share this machine) and
    carries its host's sparksim facts: its meminfo file and its faults, for the rank Ray
    starts there (sparksim/tensor_parallel.py)."""
    role = ray_nodes.HEAD if host.pk == pair.head_id else ray_nodes.WORKER
    extra: dict[str, str] = {}
    sim: dict = {}
    if host.simulated:
        extra = {
            NODE_MEMINFO_ENV: str(host.meminfo_file()),
            NODE_FAULTS_ENV: ",".join(host.fault_specs()),
            SPARKSIM_HOST: json.dumps(dataclasses.asdict(host.spec()), sort_keys=True),
        }
        sim = {
            "num_cpus": 1,
            "object_store_bytes": ray_nodes.MIN_OBJECT_STORE_BYTES,
            "ports": dict(zip(SIM_PORTS, ray_nodes.free_ports(len(SIM_PORTS)), strict=True)),
            "temp_dir": ray_temp_dir(run, host),
        }
    node = ray_nodes.RayNode(
        role=role, node_ip=pair.link_address(host), head_ip=pair.head_link_address,
        gcs_port=pair.ray_port, nccl_interface=pair.nccl_interface, extra_env=extra, **sim,
    )  # fmt: skip
    return RayNodeSpec(run_id=run.pk, host_name=host.name, node=node, image=run.image)


def server_env(run: Run) -> dict[str, str]:
    """What the head's `vllm serve` needs to use the pair's cluster."""
    pair = pair_of_run(run)
    head = ray_nodes.RayNode(
        role=ray_nodes.HEAD, node_ip=pair.head_link_address, head_ip=pair.head_link_address,
        gcs_port=pair.ray_port, nccl_interface=pair.nccl_interface,
    )  # fmt: skip
    return ray_nodes.server_env(head)


def server_temp_dir(run: Run) -> str:
    """The head node's session directory, for the API server's container to mount (a real
    Spark's node keeps Ray's default inside its container: nothing to share then)."""
    return ray_temp_dir(run, run.host) if run.host.simulated else ""


def head_node_ref(run: Run) -> str:
    """The head's Ray node as its engine names it (a container's id)."""
    return Handle.parse(run.ray_handle).ref if run.ray_handle else ""


def _send(task: str, run: Run, host: Host) -> None:
    """A task for the other Spark's worker, by name (tasks imports the runner)."""
    current_app.send_task(task, args=[run.pk], queue=host.queue)


def _step(run: Run, pusher, text: str) -> None:
    Run.objects.filter(pk=run.pk).update(step=text[:200])
    run.step = text[:200]
    pusher.push(force=True)


def _node_failure(engine: Engine, handle: Handle, side: str, step: str) -> PairFailed:
    lines = engine.tail(handle, LOG_LINES)
    found = ray_probe.diagnose(lines)
    reason = f"{side}: its Ray node exited while {step}"
    if found:
        reason += f" — {found[0]}"
    return PairFailed(reason, advice=found[1] if found else "", log_lines=lines)


def check_link(run: Run, host: Host, pair: SparkPair, engine: Engine) -> PairFailed | None:
    """This side's end of the link, read where its node will run, before the node starts:
    the NCCL interface there, up, holding the side's link address, at the pair's MTU."""
    spec = node_spec(run, host, pair)
    try:
        output = engine.check_link(spec)
    except EngineError as exc:
        return PairFailed(f"the link check could not run: {exc}")
    problem = ray_link.link_problem(
        output, spec.node.nccl_interface, spec.node.node_ip, pair.link_mtu
    )
    if problem is None:
        return None
    drop_temp_dir(run, host)  # no node will use it
    lines = output.strip().splitlines()[-LOG_LINES:] if problem.kind == "unknown" else []
    return PairFailed(problem.reason, advice=problem.advice, log_lines=lines)


def form_cluster(run: Run, engine: Engine, pusher, check_stop) -> None:
    """The head's half: its Ray node, the worker Spark asked to join, the probe until the
    cluster is whole. Raises PairFailed naming the side and the step."""
    pair = pair_of_run(run)
    head, peer = run.host, run.peer_host
    side = f"{head.name} (the pair's head)"
    _step(run, pusher, f"Checking {head.name}'s end of the link")
    failed = check_link(run, head, pair, engine)
    if failed:
        raise PairFailed(f"{side}: {failed.reason}", advice=failed.advice,
                         log_lines=failed.log_lines)  # fmt: skip
    _step(run, pusher, f"Starting the Ray head on {head.name}")
    try:
        handle = engine.start_ray_node(node_spec(run, head, pair))
    except EngineError as exc:
        raise PairFailed(f"{side}: the Ray head did not start: {exc}") from None
    Run.objects.filter(pk=run.pk).update(ray_handle=str(handle))
    run.ray_handle = str(handle)
    if not Run.objects.filter(pk=run.pk).values_list("peer_state", flat=True).first():
        ask_to_join(run)  # not asked yet (a start resumed before the first ask)
    sides = {head.name: pair.head_link_address, peer.name: pair.worker_link_address}
    # The worker Spark may still be downloading its copy of the weights: the wait ends
    # when it has shown no progress for JOIN_TIMEOUT_S, not at a fixed time.
    deadline, seen = time.monotonic() + JOIN_TIMEOUT_S, None
    problem = "not probed yet"
    while time.monotonic() < deadline:
        check_stop(run)
        if engine.status(handle).state is not State.RUNNING:
            # A worker that cannot join (another Ray version) can take the head's node down
            # with it: its own report, arriving a moment later, is the cause to name.
            raise _worker_failure(run, peer, PEER_REPORT_GRACE_S) or _node_failure(
                engine, handle, side, "the cluster formed"
            )
        reported = Run.objects.filter(pk=run.pk).values_list("peer_state", flat=True).first()
        if reported != seen:
            seen, deadline = reported, time.monotonic() + JOIN_TIMEOUT_S
            _step(run, pusher, f"Waiting for {peer.name} to join the Ray cluster"
                  + (f" ({reported['step']})" if (reported or {}).get("step") else ""))  # fmt: skip
        failed = _worker_failure(run, peer, 0)
        if failed:
            raise failed
        view = ray_probe.parse_probe(engine.probe_cluster(handle, pair.ray_address))
        problem = ray_probe.cluster_problem(view, sides)
        if problem is None:
            mismatch = _commit_mismatch(run, reported or {})
            if mismatch:
                raise PairFailed(
                    mismatch,
                    advice="Start it again: both Sparks then download "
                    "the same, newest commit (or pin a revision on the recipe).",
                )
            facts = {**run.facts, "ray_version": view.ray_version,
                     "pair": {"head": head.name, "worker": peer.name,
                              "ray_address": pair.ray_address}}  # fmt: skip
            Run.objects.filter(pk=run.pk).update(facts=facts)
            run.facts = facts
            _step(run, pusher, f"Ray cluster ready: {head.name} and {peer.name}, one GPU each")
            return
        time.sleep(PROBE_EVERY_S)
    raise PairFailed(
        f"the pair's Ray cluster was not whole after {JOIN_TIMEOUT_S} s: {problem}",
        advice=f"Is {peer.name}'s worker running (the Hosts page)? Is the link up, and are "
        "the pair's link addresses right? docs/two-sparks.md has the checklist.",
        log_lines=engine.tail(handle, LOG_LINES),
    )


def _worker_failure(run: Run, peer: Host, wait_s: float) -> PairFailed | None:
    """The worker Spark's reported failure, waiting up to `wait_s` for it; None if none."""
    deadline = time.monotonic() + wait_s
    while True:
        reported = Run.objects.filter(pk=run.pk).values_list("peer_state", flat=True).first()
        if (reported or {}).get("error"):
            return PairFailed(
                f"{peer.name} (the pair's worker) failed at “{reported.get('step', '?')}”: "
                f"{reported['error']}",
                advice=reported.get("advice", ""), log_lines=reported.get("log", []),
            )  # fmt: skip
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def _commit_mismatch(run: Run, reported: dict) -> str | None:
    """Both Sparks must serve the same checkpoint: the head pins the commit it downloaded;
    the worker Spark reports the one it got."""
    mine = (run.facts.get("weights") or {}).get("commit")
    theirs = reported.get("commit")
    if mine and theirs and mine != theirs:
        return (
            f"the two Sparks downloaded different commits of {run.recipe.model_id}: "
            f"{run.host.name} {mine[:12]}, {run.peer_host.name} {theirs[:12]} (the model "
            "changed upstream between the two downloads)"
        )
    return None


def ask_to_join(run: Run) -> None:
    """The worker Spark's worker is asked to do its half: at the start of the run, so it
    downloads its copy of the weights while the head downloads its own."""
    _report(run.pk, step="asked to join")
    _send("runs.pair_join", run, run.peer_host)


_RANK_DIED = re.compile(r"RayWorkerProc rank=\[?([\d, ]{1,20})\]? died unexpectedly")


def name_the_side(run: Run, reason: str, lines: list[str]) -> str:
    """A pair run's failure, saying which Spark it came from when the log or the worker
    Spark's report tells: a dead rank (rank 0 is the head's, rank 1 the worker's, as vLLM
    places them driver-first) or the worker Spark's own failure."""
    found = _RANK_DIED.search("\n".join(lines[-LOG_LINES:]) + "\n" + reason)
    if found:
        ranks = sorted({int(n) for n in re.findall(r"\d+", found.group(1))})
        sides = [f"{run.host.name} (head, rank 0)" if r == 0
                 else f"{run.peer_host.name} (worker, rank {r})" for r in ranks]  # fmt: skip
        return f"{' and '.join(sides)}: its tensor-parallel rank died — {reason}"
    reported = Run.objects.filter(pk=run.pk).values_list("peer_state", flat=True).first() or {}
    if reported.get("error") and run.peer_host.name not in reason:
        return f"{reason} ({run.peer_host.name}, the pair's worker: {reported['error']})"
    return reason


def _report(run_id: int, **state) -> None:
    Run.objects.filter(pk=run_id).update(peer_state=state)


def join(run_id: int) -> None:
    """The worker Spark's half (on its own queue): start its Ray node, then watch it while
    the run starts; report a failure with the node's own lines."""
    run = Run.objects.select_related("host", "peer_host").filter(pk=run_id).first()
    if run is None or run.state not in STARTING_STATES:
        return
    peer = run.peer_host
    try:
        pair = pair_of_run(run)
    except PairFailed as exc:
        _report(run.pk, step="checking the pair", error=exc.reason)
        return
    engine = engine_for(peer)
    _report(run.pk, step="checking its link")
    failed = check_link(run, peer, pair, engine)
    if failed:
        _report(run.pk, step="checking its link", error=failed.reason, advice=failed.advice,
                log=failed.log_lines)  # fmt: skip
        return
    commit = _download_here(run)
    if commit is None:
        return  # reported, or the run is no longer starting
    # Its node joins the head's: wait for the head's node (the head may still download).
    _report(run.pk, step="waiting for the head's Ray node", commit=commit)
    while not Run.objects.filter(pk=run.pk).exclude(ray_handle="").exists():
        if Run.objects.filter(pk=run.pk).values_list("state", flat=True).first() not in (
            STARTING_STATES
        ):
            return
        time.sleep(WATCH_EVERY_S)
    step = "starting its Ray node"
    _report(run.pk, step=step, commit=commit)
    try:
        handle = engine.start_ray_node(node_spec(run, peer, pair))
    except (PairFailed, EngineError) as exc:
        _report(run.pk, step=step, error=str(exc)[:1000], commit=commit)
        return
    Run.objects.filter(pk=run.pk).update(peer_handle=str(handle))
    step = "joining the head's Ray cluster"
    _report(run.pk, step=step, commit=commit)
    while True:
        state = Run.objects.filter(pk=run.pk).values_list("state", flat=True).first()
        if state not in STARTING_STATES:
            break
        if engine.status(handle).state is not State.RUNNING:
            failure = _node_failure(engine, handle, peer.name, step)
            _report(run.pk, step=step, error=failure.reason.partition(": ")[2],
                    advice=failure.advice, log=failure.log_lines, commit=commit)  # fmt: skip
            return
        time.sleep(WATCH_EVERY_S)
    if state in (S.STOPPING, S.STOPPED, S.FAILED):
        leave(run.pk)  # the head gave up: do not wait for its message
    else:
        _report(run.pk, step="serving: its rank runs in its Ray node", commit=commit)


def _download_here(run: Run) -> str | None:
    """The worker Spark's own copy of the weights, in its own cache, with progress in
    `peer_state` (docs/weights.md). The commit it has ("" where vLLM reads the model
    itself); None when it failed (reported) or the run stopped meanwhile."""
    peer, recipe = run.peer_host, run.recipe
    if peer.weights_not_downloaded(recipe.model_id) is not None:
        return ""
    step = f"downloading {recipe.model_id}"
    _report(run.pk, step=step)
    last = 0.0

    def progress(report: dict) -> None:
        nonlocal last
        if time.monotonic() - last >= 1.0:
            last = time.monotonic()
            line, _percent = weights.progress_line(report)
            _report(run.pk, step=f"{step}: {line}"[:300], download=report)

    def should_stop() -> bool:
        state = Run.objects.filter(pk=run.pk).values_list("state", flat=True).first()
        return state not in STARTING_STATES or state == S.STOPPING

    try:
        fetched = weights.fetch(peer, recipe.model_id, recipe.revision, on_progress=progress,
                                should_stop=should_stop)  # fmt: skip
    except DownloadStopped:
        return None
    except weights.WeightsFailed as exc:
        _report(run.pk, step=step, error=exc.reason, advice=exc.advice)
        return None
    weights.scan(peer)  # its Hosts page shows what the download added
    return fetched.commit


def leave(run_id: int) -> None:
    """The worker Spark's half of a teardown: its Ray node stopped and removed."""
    run = Run.objects.select_related("peer_host").filter(pk=run_id).first()
    if run is None or not run.peer_handle:
        return
    engine = engine_for(run.peer_host)
    handle = Handle.parse(run.peer_handle)
    with contextlib.suppress(EngineError):
        engine.stop(handle, timeout=15)
        engine.remove(handle)
    drop_temp_dir(run, run.peer_host)
    state = {**(run.peer_state or {}), "step": "left the Ray cluster"}
    Run.objects.filter(pk=run.pk).update(peer_state=state)


def teardown(run: Run, engine: Engine | None = None) -> None:
    """Stop the head's Ray node here and ask the worker Spark to stop its own. Safe to
    call twice."""
    if not run.peer_host_id:
        return
    engine = engine or engine_for(run.host)
    if run.ray_handle:
        handle = Handle.parse(run.ray_handle)
        with contextlib.suppress(EngineError):
            engine.stop(handle, timeout=15)
            engine.remove(handle)
        drop_temp_dir(run, run.host)
    peer = run.peer_host
    _send("runs.pair_leave", run, peer)


def stop_head(run_id: int) -> None:
    """The head's half of a teardown decided elsewhere (the watchdog on the worker Spark):
    the server and the head's Ray node stopped and removed, on the head's own queue."""
    run = Run.objects.select_related("host", "peer_host").filter(pk=run_id).first()
    if run is None:
        return
    engine = engine_for(run.host)
    for text in filter(None, (run.handle, run.ray_handle)):
        handle = Handle.parse(text)
        with contextlib.suppress(EngineError):
            engine.stop(handle, timeout=15)
            engine.remove(handle)
    drop_temp_dir(run, run.host)


def stop_other_side(run: Run, host: Host) -> None:
    """After this Spark's half was killed: the other Spark's worker stops its own."""
    if host.pk == run.host_id:
        _send("runs.pair_leave", run, run.peer_host)
    else:
        _send("runs.pair_stop_head", run, run.host)


def stop_side(run: Run, host: Host, engine: Engine) -> list[str]:
    """Kill this Spark's part of a run at once (the watchdog): the server and the head's
    node on the head, the worker's node on the worker. Its handles' last log lines."""
    handles = [run.handle, run.ray_handle] if host.pk == run.host_id else [run.peer_handle]
    lines: list[str] = []
    for text in filter(None, handles):
        handle = Handle.parse(text)
        with contextlib.suppress(EngineError):
            lines += engine.tail(handle, LOG_LINES)
            engine.kill(handle)
            engine.remove(handle)
    return lines

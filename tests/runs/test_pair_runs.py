"""A TP-2 recipe on a pair of simulated Sparks, end to end: each Spark's own real Celery
worker does its half on its own queue, the Ray cluster is real (a head node for one Spark
on 127.0.0.2, a worker node for the other on 127.0.0.3), and sparksim plays vLLM's Ray
executor on it (apps/runs/pair.py, sparksim/tensor_parallel.py)."""

from __future__ import annotations

import os
import signal

import httpx
import openai
import pytest
from django.db import connection

from apps.hosts.engines import engine_for
from apps.hosts.engines.base import ROLE_RAY, Handle, State
from apps.hosts.models import Host, SparkPair
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
from apps.runs.services import RunRefused, run_start, run_stop
from apps.telemetry.models import Incident
from sparkdomain.spark import GB
from tests.conftest import (
    ROOT,
    free_port,
    kill_worker_tree,
    ports,
    require_service,
    stop_process,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]
OTHER_RAY = "2.59.0"  # tools/other_ray.sh


def _run(run: Run) -> Run:
    return Run.objects.select_related("host", "peer_host").get(pk=run.pk)


@pytest.fixture
def pair_hosts(settings, tmp_path):
    settings.VAR_DIR = tmp_path  # the test reads what the workers write
    hosts = []
    for i, name in enumerate(["spark-p1", "spark-p2"]):
        hosts.append(Host.objects.create(
            name=name, engine=Host.Engine.PROCESS, simulated=True, sim_time_scale=40,
            **ports(22000 + 100 * i, 22099 + 100 * i),
        ))  # fmt: skip
    pair = SparkPair.objects.create(
        name="pair-1", head=hosts[0], worker=hosts[1], head_link_address="127.0.0.2",
        worker_link_address="127.0.0.3", ray_port=free_port(),
    )  # fmt: skip
    yield pair
    for host in hosts:  # nothing outlives its test, on either Spark
        engine = engine_for(host)
        for managed in engine.list_managed():
            engine.stop(managed.handle, timeout=5)


@pytest.fixture
def qwen_tp2(qwen) -> Recipe:
    qwen.pk, qwen.slug, qwen.name = None, "qwen-tp2", "Qwen on a pair"
    qwen.tensor_parallel_size = 2
    qwen.save()
    return qwen


def _shared(tmp_path, settings, **extra: str) -> dict[str, str]:
    """The workers' environment: the test's database and var/, and its SECRET_KEY (the
    run's own vLLM key is derived from it)."""
    return {"DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
            "SPARKPANEL_VAR_DIR": str(tmp_path), "SECRET_KEY": settings.SECRET_KEY, **extra}  # fmt: skip


@pytest.fixture
def pair_workers(start_worker, pair_hosts, tmp_path, settings):
    shared = _shared(tmp_path, settings)
    for host in pair_hosts.hosts:
        start_worker(host.queue, host.name, **shared)
    return pair_hosts


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"worker_link_address": "127.0.0.2"}, "worker_link_address", "its own address"),
        ({"worker_id": None}, "worker", "two different Sparks"),
    ],
)
def test_a_pair_is_two_different_sparks_alike(pair_hosts, change, field, message):
    from django.core.exceptions import ValidationError

    pair = pair_hosts
    if change.get("worker_id", 1) is None:
        change = {"worker_id": pair.head_id}
    for key, value in change.items():
        setattr(pair, key, value)
    with pytest.raises(ValidationError) as invalid:
        pair.clean()
    assert message in " ".join(invalid.value.message_dict[field])


def test_a_pair_needs_both_sparks_at_one_speed(pair_hosts):
    from django.core.exceptions import ValidationError

    Host.objects.filter(pk=pair_hosts.worker_id).update(sim_time_scale=1)
    pair = SparkPair.objects.get(pk=pair_hosts.pk)
    with pytest.raises(ValidationError, match="runs at one speed"):
        pair.clean()


def test_a_tp2_recipe_needs_a_pair(sim_host, qwen_tp2, operator):
    with pytest.raises(RunRefused) as refused:
        run_start(recipe=qwen_tp2, host=sim_host, user=operator)
    assert refused.value.code == "needs_pair"
    assert "is not in a pair" in str(refused.value)


def test_a_pair_of_docker_hosts_with_their_own_networks_is_refused(qwen_tp2, operator):
    hosts = [Host.objects.create(name=n, engine=Host.Engine.DOCKER) for n in ("d-1", "d-2")]
    SparkPair.objects.create(name="dpair", head=hosts[0], worker=hosts[1],
                             head_link_address="10.0.0.1", worker_link_address="10.0.0.2")  # fmt: skip
    with pytest.raises(RunRefused) as refused:
        run_start(recipe=qwen_tp2, host=hosts[0], user=operator)
    assert refused.value.code == "pair_network"
    assert "d-1 and d-2 give containers their own network" in str(refused.value)


def test_the_pairs_second_spark_without_a_worker_is_refused_at_admission(
    pair_hosts, qwen_tp2, operator, redis_url
):
    with pytest.raises(RunRefused) as refused:
        run_start(recipe=qwen_tp2, host=pair_hosts.head, user=operator)
    assert refused.value.code == "peer_offline"
    assert "spark-p2, the pair's worker Spark, has no live worker" in str(refused.value)
    assert not Run.objects.exists()  # nothing started, on either side


@pytest.mark.parametrize("case", ["mtu", "missing", "down", "not the link's"])
def test_a_bad_link_fails_the_pair_before_any_node_starts(
    request, pair_workers, qwen_tp2, operator, case
):
    """Each side's worker reads its end of the link from the kernel before its Ray node
    starts: the interface, its state, the side's address on it, its MTU."""
    pair = pair_workers
    mtu = int(open("/sys/class/net/lo/mtu").read())  # noqa: SIM115
    interface, expected_mtu = "lo", None
    if case == "mtu":  # this machine's loopback, and a pair that expects jumbo frames
        expected_mtu, want = 9000, f"its lo has MTU {mtu}, the pair expects 9000"
        advice = "same MTU on both Sparks"
    elif case == "missing":  # a name from another machine: NCCL interface wrong
        interface, want = "enp1s0f1np1", "there is no interface enp1s0f1np1 (the pair's NCCL"
        advice = "ConnectX interface's name"
    else:  # a real interface (a veth pair): down at the far end, or up but not the link's
        veth = request.getfixturevalue("veth_link")
        interface = veth.near
        veth.set(veth.near, "up")
        if case == "down":
            want, advice = f"the link is down: its {interface} has no carrier", "check the cable"
        else:
            veth.set(veth.far, "up")
            want = f"its link address 127.0.0.2 is not on {interface}; {interface} has no IPv4"
            advice = "must be an address of its NCCL interface"
    SparkPair.objects.filter(pk=pair.pk).update(nccl_interface=interface, link_mtu=expected_mtu)
    run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
    wait_for(lambda: _run(run).state == RunState.FAILED, 60, "the pair fails")
    run = _run(run)
    assert f"spark-p1 (the pair's head): {want}" in run.failure_reason
    assert advice in run.failure_advice
    assert not run.ray_handle and not run.peer_handle  # no Ray node started on either side
    _nothing_left(pair)


def test_the_worker_sparks_bad_link_is_named_as_its_failure(pair_workers, qwen_tp2, operator):
    pair = pair_workers
    # The head's end is fine; the worker Spark's address is none of this machine's
    # (TEST-NET-2: the check only tries to bind it, nothing is sent there).
    SparkPair.objects.filter(pk=pair.pk).update(worker_link_address="198.51.100.7")
    run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
    wait_for(lambda: _run(run).state == RunState.FAILED, 90, "the pair fails")
    run = _run(run)
    assert run.failure_reason.startswith(
        "spark-p2 (the pair's worker) failed at “checking its link”: no interface of this "
        "Spark has its link address 198.51.100.7"
    ), run.failure_reason
    assert "correct the pair's link addresses" in run.failure_advice
    assert not run.peer_handle
    _nothing_left(pair)


def test_a_worker_spark_with_another_ray_version_fails_the_pair_naming_both(
    start_worker, pair_hosts, qwen_tp2, operator, tmp_path, settings
):
    """The worker Spark's worker runs with Ray 2.59 (tools/other_ray.sh: as if its image
    had another vLLM), the head's with the pinned 2.60: Ray itself refuses the join."""
    import ray

    other = ROOT / "var" / f"ray-{OTHER_RAY}" / "bin" / "python"
    require_service(other.exists(), f"Ray {OTHER_RAY} in var/ (tools/other_ray.sh)")
    pair = pair_hosts
    shared = _shared(tmp_path, settings)
    start_worker(pair.head.queue, pair.head.name, **shared)
    start_worker(pair.worker.queue, pair.worker.name, python=str(other), **shared)
    run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
    wait_for(lambda: _run(run).state == RunState.FAILED, 180, "the pair fails")
    run = _run(run)
    assert run.failure_reason.startswith(
        "spark-p2 (the pair's worker) failed at “joining the head's Ray cluster”: its Ray "
        "node exited while joining the head's Ray cluster — the two Sparks run different "
        f"Ray (or Python) versions: the head's cluster runs Ray {ray.__version__} "
    ), run.failure_reason
    assert f"this Spark's node Ray {OTHER_RAY} " in run.failure_reason
    assert "same image" in run.failure_advice
    assert "RuntimeError: Version mismatch: The cluster was started with:" in run.failure_log
    _nothing_left(pair)


def test_a_pair_run_starts_on_both_sparks_serves_and_stops_on_both(
    pair_workers, qwen_tp2, operator, client_as, panel, gateway_key
):
    pair = pair_workers
    # Started from the worker Spark's name: a pair run lives on its head.
    run = run_start(recipe=qwen_tp2, host=pair.worker, user=operator)
    assert run.host == pair.head and run.peer_host == pair.worker
    argv = run.argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    wait_for(lambda: _run(run).state in (RunState.READY, RunState.FAILED), 180, "pair ready")
    run = _run(run)
    assert run.state == RunState.READY, (run.failure_reason, run.failure_log)
    assert run.facts["pair"] == {"head": "spark-p1", "worker": "spark-p2",
                                 "ray_address": pair.ray_address}  # fmt: skip
    assert run.facts["ray_version"]
    # The worker Spark's worker saw the run ready and let go (its node keeps serving).
    wait_for(lambda: _run(run).peer_state["step"].startswith("serving"), 10, "worker's report")
    # Each side's worker runs its own Ray node, labelled with the run.
    for host in pair.hosts:
        roles = [(m.run_id, m.role) for m in engine_for(host).list_managed()]
        assert (run.pk, ROLE_RAY) in roles
    # The progress came from the head's log, through Ray's worker prefix.
    assert "(RayWorkerProc pid=" in run.log_tail
    assert {"starting", "loading", "compiling", "warming"} <= set(run.phase_seconds())
    # Each Spark holds its half of the model, in its own memory.
    for host in pair.hosts:
        used = host.memory().total_bytes - host.memory().available_bytes
        assert used > 40 * GB, host.name
    answer = httpx.post(f"{run.local_endpoint}/v1/chat/completions", headers=run.upstream_headers,
                        json={"model": run.served_name, "max_tokens": 5,
                              "messages": [{"role": "user", "content": "hi"}]}, timeout=30)  # fmt: skip
    assert answer.status_code == 200, answer.text
    # The team's endpoint serves it like any ready run: the openai SDK through /v1.
    client = openai.OpenAI(base_url=panel.v1, api_key=gateway_key(operator), max_retries=0)
    reply = client.chat.completions.create(model=run.served_name, max_tokens=6,
                                           messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert reply.usage.completion_tokens == 6
    # The run page says it is a pair and shows the worker Spark's memory beside the head's.
    page = client_as(operator).get(run.get_absolute_url()).content.decode()
    assert "tensor parallel 2 over two Sparks on Ray" in page
    assert "Memory — spark-p2 (the pair's worker)" in page
    assert "/ws/telemetry/host/spark-p2/" in page

    run_stop(run=run)
    wait_for(lambda: _run(run).state == RunState.STOPPED, 60, "pair stopped")
    # Both halves are gone: the head's server and Ray node, the worker Spark's node.
    for host in pair.hosts:
        wait_for(lambda host=host: engine_for(host).list_managed() == [], 30,
                 f"nothing left on {host.name}")  # fmt: skip
    wait_for(lambda: _run(run).peer_state.get("step") == "left the Ray cluster", 30, "left")


def test_the_watchdog_on_the_worker_spark_stops_the_whole_pair(
    pair_workers, qwen_tp2, operator, settings, tmp_path
):
    from tests.guard.test_agent import _agent_process  # a real `manage.py hostagent`

    pair = pair_workers
    # Only the worker Spark leaks (its own fault, in its own Ray node's rank).
    Host.objects.filter(pk=pair.worker_id).update(sim_faults="mem-growth:6")
    agent = _agent_process(pair.worker, settings, tmp_path, "--memory-interval", "0.25")
    try:
        run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
        wait_for(lambda: _run(run).state == RunState.FAILED, 180, "the watchdog stops the pair",
                 agent)  # fmt: skip
    finally:
        stop_process(agent)
    run = _run(run)
    assert run.failure_reason.startswith("stopped by the memory watchdog on spark-p2")
    assert "the whole pair was stopped" in run.failure_advice
    act = Incident.objects.get(host=pair.worker, kind=Incident.Kind.ACT)
    assert act.run_id == run.pk and "killed spark-p2's half (worker)" in act.action
    # Both halves are gone: the worker's node killed by its agent, the head's server and
    # node stopped by the head's own worker.
    for host in pair.hosts:
        wait_for(lambda host=host: engine_for(host).list_managed() == [], 60,
                 f"nothing left on {host.name}")  # fmt: skip
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{run.local_endpoint}/v1/models", timeout=1)


def _ray_node_pid(host: Host, run: Run) -> int:
    [node] = [
        m for m in engine_for(host).list_managed() if m.run_id == run.pk and m.role == ROLE_RAY
    ]
    return int(node.handle.ref.partition(":")[0])


def _nothing_left(pair: SparkPair) -> None:
    for host in pair.hosts:
        wait_for(lambda host=host: engine_for(host).list_managed() == [], 60,
                 f"nothing left on {host.name}")  # fmt: skip


def test_the_worker_sparks_ray_node_killed_mid_load_fails_the_pair_naming_it(
    pair_workers, qwen_tp2, operator
):
    pair = pair_workers
    Host.objects.filter(pk__in=[h.pk for h in pair.hosts]).update(sim_time_scale=5)  # a slow load
    run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
    wait_for(lambda: _run(run).state == RunState.LOADING, 120, "loading")
    os.killpg(_ray_node_pid(pair.worker, run), signal.SIGKILL)  # the worker Spark's node
    wait_for(lambda: _run(run).state == RunState.FAILED, 120, "the pair fails")
    run = _run(run)
    assert "spark-p2 (worker, rank 1): its tensor-parallel rank died" in run.failure_reason
    assert "rank 1 on its worker Spark" in run.failure_advice
    assert "RayWorkerProc rank=[1] died unexpectedly" in run.failure_log
    _nothing_left(pair)


def test_the_worker_sparks_ray_node_killed_mid_serve_fails_the_pair_at_reconcile(
    pair_workers, qwen_tp2, operator
):
    from apps.runs.tasks import reconcile

    pair = pair_workers
    run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
    wait_for(lambda: _run(run).state in (RunState.READY, RunState.FAILED), 180, "pair ready")
    assert _run(run).state == RunState.READY, (_run(run).failure_reason, _run(run).failure_log)
    os.killpg(_ray_node_pid(pair.worker, run), signal.SIGKILL)
    # The server dies with its rank; the head's periodic reconcile sees it.
    wait_for(lambda: engine_for(pair.head).status(Handle.parse(_run(run).handle)).state
             is not State.RUNNING, 60, "the server ends with its rank")  # fmt: skip
    reconcile.apply_async(args=[pair.head_id], queue=pair.head.queue)
    wait_for(lambda: _run(run).state == RunState.FAILED, 60, "reconcile fails the pair")
    run = _run(run)
    assert "spark-p2 (worker, rank 1): its tensor-parallel rank died" in run.failure_reason
    _nothing_left(pair)


def test_the_heads_worker_killed_mid_start_is_adopted_with_one_of_everything(
    start_worker, pair_hosts, qwen_tp2, operator, tmp_path, settings
):
    pair = pair_hosts
    Host.objects.filter(pk__in=[h.pk for h in pair.hosts]).update(sim_time_scale=10)
    shared = _shared(tmp_path, settings)
    head_node = start_worker(pair.head.queue, pair.head.name, **shared)
    start_worker(pair.worker.queue, pair.worker.name, **shared)
    run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
    wait_for(lambda: _run(run).state == RunState.LOADING, 120, "loading")
    handles = (_run(run).handle, _run(run).ray_handle, _run(run).peer_handle)
    kill_worker_tree(start_worker.processes[head_node])  # its server and nodes live on

    start_worker(pair.head.queue, pair.head.name + "-2", **shared)  # reconciles at start
    wait_for(lambda: _run(run).state in (RunState.READY, RunState.FAILED), 180, "adopted")
    run = _run(run)
    assert run.state == RunState.READY, (run.failure_reason, run.failure_log[-2000:])
    assert (run.handle, run.ray_handle, run.peer_handle) == handles  # adopted, not restarted
    head = sorted((m.role, str(m.handle)) for m in engine_for(pair.head).list_managed())
    assert head == sorted([("server", run.handle), (ROLE_RAY, run.ray_handle)])
    assert [str(m.handle) for m in engine_for(pair.worker).list_managed()] == [run.peer_handle]


def test_a_pair_of_docker_hosts_runs_its_ray_nodes_and_server_in_containers(
    start_worker, docker_url, qwen_tp2, operator, tmp_path, settings
):
    import docker

    from apps.hosts.engines.docker import LABEL_HOST

    settings.VAR_DIR = tmp_path
    hosts = []
    for i, name in enumerate(["dpair-1", "dpair-2"]):
        hosts.append(Host.objects.create(
            name=name, engine=Host.Engine.DOCKER, simulated=True, docker_url=docker_url,
            docker_network=Host.DockerNetwork.HOST, gpus=False, sim_time_scale=40,
            **ports(24000 + 100 * i, 24099 + 100 * i),
        ))  # fmt: skip
    pair = SparkPair.objects.create(
        name="dpair", head=hosts[0], worker=hosts[1], head_link_address="127.0.0.2",
        worker_link_address="127.0.0.3", ray_port=free_port(),
    )  # fmt: skip
    shared = _shared(tmp_path, settings)
    for host in hosts:
        start_worker(host.queue, host.name, **shared)
    client = docker.DockerClient(base_url=docker_url)
    try:
        run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
        wait_for(lambda: _run(run).state in (RunState.READY, RunState.FAILED), 240, "pair ready")
        run = _run(run)
        assert run.state == RunState.READY, (run.failure_reason, run.failure_log[-3000:])
        # Each Spark: its Ray node is a container of its own, labelled with the run and
        # its role; the head also runs the API server's.
        for host, roles in ((hosts[0], {"ray", "server"}), (hosts[1], {"ray"})):
            managed = engine_for(host).list_managed()
            assert {m.role for m in managed} == roles and {m.run_id for m in managed} == {run.pk}
            for container in client.containers.list(filters={"label": f"{LABEL_HOST}={host.name}"}):
                config = container.attrs["HostConfig"]
                assert not config["Privileged"] and not config["CapAdd"]
                assert config["NetworkMode"] == "host"
        answer = httpx.post(f"{run.local_endpoint}/v1/chat/completions",
                            headers=run.upstream_headers, timeout=30,
                            json={"model": run.served_name, "max_tokens": 4,
                                  "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
        assert answer.status_code == 200, answer.text
        run_stop(run=run)
        wait_for(lambda: _run(run).state == RunState.STOPPED, 60, "pair stopped")
        _nothing_left(pair)
    finally:
        for host in hosts:
            for container in client.containers.list(
                all=True, filters={"label": f"{LABEL_HOST}={host.name}"}
            ):
                container.remove(force=True)
        client.close()


def test_each_spark_of_a_pair_downloads_its_own_copy_of_the_weights(
    pair_hosts, qwen_tp2, operator, start_worker, hub, tmp_path, settings
):
    from hubsim import store
    from tests.runs.test_weights import model_files

    pair = pair_hosts
    settings.HF_ENDPOINT, settings.WEIGHTS_DISK_RESERVE_BYTES = hub.url, 0
    for host in pair.hosts:  # each Spark has its own Hugging Face cache
        (tmp_path / f"{host.name}-hf").mkdir()
        Host.objects.filter(pk=host.pk).update(hf_cache_path=str(tmp_path / f"{host.name}-hf"))
    commit = store.publish(hub.root, qwen_tp2.model_id, model_files(shard_mib=16))
    shared = _shared(tmp_path, settings, HF_ENDPOINT=hub.url, WEIGHTS_DISK_RESERVE_GB="0")
    for host in pair.hosts:
        start_worker(host.queue, host.name, **shared)
    run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
    wait_for(lambda: _run(run).state in (RunState.READY, RunState.FAILED), 180, "pair ready")
    run = _run(run)
    assert run.state == RunState.READY, (run.failure_reason, run.failure_advice)
    # Both Sparks hold the same commit in their own caches (the worker Spark downloaded
    # its copy itself, while the head downloaded its own).
    assert run.facts["weights"]["commit"] == run.peer_state["commit"] == commit
    for host in pair.hosts:
        host.refresh_from_db()
        [model] = host.weights_cache["models"]
        assert model["repo"] == qwen_tp2.model_id
        assert [r["commit"] for r in model["revisions"]] == [commit]
    run_stop(run=run)
    wait_for(lambda: _run(run).state == RunState.STOPPED, 60, "pair stopped")


def test_the_worker_sparks_worker_killed_mid_start_leaves_the_pair_to_come_up(
    start_worker, pair_hosts, qwen_tp2, operator, tmp_path, settings
):
    pair = pair_hosts
    Host.objects.filter(pk__in=[h.pk for h in pair.hosts]).update(sim_time_scale=10)
    shared = _shared(tmp_path, settings)
    start_worker(pair.head.queue, pair.head.name, **shared)
    peer_node = start_worker(pair.worker.queue, pair.worker.name, **shared)
    run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
    wait_for(lambda: _run(run).state == RunState.LOADING, 120, "loading")
    peer_handle = _run(run).peer_handle
    kill_worker_tree(start_worker.processes[peer_node])  # its Ray node lives on

    # The worker Spark's node keeps its rank: the pair comes up without its worker...
    wait_for(lambda: _run(run).state in (RunState.READY, RunState.FAILED), 180, "ready")
    run = _run(run)
    assert run.state == RunState.READY, (run.failure_reason, run.failure_log[-2000:])
    # ...and its restarted worker (which reconciles at start) leaves the running node be.
    before = Host.objects.get(pk=pair.worker_id).inventory_at
    start_worker(pair.worker.queue, pair.worker.name + "-2", **shared)
    wait_for(lambda: Host.objects.get(pk=pair.worker_id).inventory_at != before, 60,
             "the restarted worker's reconcile")  # fmt: skip
    managed = engine_for(pair.worker).list_managed()
    assert [str(m.handle) for m in managed] == [peer_handle]
    assert managed[0].status.state is State.RUNNING


def test_a_benchmark_job_on_a_pair_starts_it_and_measures_it(
    start_worker, pair_hosts, qwen_tp2, member, tmp_path, settings
):
    from apps.benchmarks import runner as jobs
    from apps.benchmarks.models import J, Result, Suite
    from apps.benchmarks.services import job_queue
    from apps.runs import runner

    pair = pair_hosts
    start_worker(pair.worker.queue, pair.worker.name, **_shared(tmp_path, settings))
    suite = Suite.objects.create(
        name="pair quick", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 32}],
        repetitions=1, warmup_requests=1, sweep_levels=[1, 2], requests_per_level=2,
    )  # fmt: skip
    # The head's worker's job, run here: it starts the pair run itself (both halves).
    job = job_queue(suite=suite, recipe=qwen_tp2, host=pair.head, user=member)
    jobs.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == J.DONE, job.error
    run = _run(Run(pk=job.run_id))
    assert run.is_pair and run.peer_host == pair.worker
    assert all(r.complete and r.failed == 0 for r in job.results.filter(kind=Result.Kind.SWEEP))
    runner.stop(run.pk)
    _nothing_left(pair)


def test_a_restarted_pair_run_comes_back_on_both_sparks(pair_workers, qwen_tp2, operator):
    from apps.runs.services import run_restart

    pair = pair_workers
    run = run_start(recipe=qwen_tp2, host=pair.head, user=operator)
    wait_for(lambda: _run(run).state in (RunState.READY, RunState.FAILED), 180, "pair ready")
    assert _run(run).state == RunState.READY
    run_restart(run=_run(run), user=operator)
    wait_for(lambda: Run.objects.filter(restart_of=run).exists(), 90, "the new run")
    new = Run.objects.get(restart_of=run)
    wait_for(lambda: _run(new).state in (RunState.READY, RunState.FAILED), 180, "again ready")
    new = _run(new)
    assert new.state == RunState.READY, (new.failure_reason, new.failure_log[-2000:])
    assert _run(run).state == RunState.STOPPED
    assert (new.host, new.peer_host) == (pair.head, pair.worker)
    # One server and one Ray node per side: the new run's; the old run's are gone.
    for host in pair.hosts:
        assert {m.run_id for m in engine_for(host).list_managed()} == {new.pk}
    run_stop(run=new)
    wait_for(lambda: _run(new).state == RunState.STOPPED, 60, "stopped")
    _nothing_left(pair)

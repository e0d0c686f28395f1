"""A real two-node Ray cluster for the tests: a simulated pair of Sparks on loopback
(127.0.0.2 the head, 127.0.0.3 the worker), each node `ray start --block` (the vector
ray_adapter builds for the panel) in its own process group, declaring one GPU.

Never `ray stop`: it would stop every Ray on the machine (another test's, a CI run's). A
node is stopped by signalling its own process group.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ray_adapter import nodes, probe
from tests.conftest import ROOT

HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
RAY = str(Path(sys.executable).with_name("ray"))


@dataclass
class Node:
    spec: nodes.RayNode
    proc: subprocess.Popen
    log_path: Path
    meminfo: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """The node and everything it started (raylet, its workers: the ranks)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(timeout=10)
        # raylet children may outlive `ray start` in their own group; they share ours
        self.kill()


@dataclass
class Cluster:
    root: Path
    nodes: list[Node] = field(default_factory=list)

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def worker(self) -> Node:
        return self.nodes[1]

    @property
    def address(self) -> str:
        return self.head.spec.head_address

    def view(self) -> probe.ClusterView:
        try:
            out = subprocess.run(
                probe.probe_argv(sys.executable, self.address),
                capture_output=True, text=True, timeout=60, cwd=ROOT,
                env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return probe.ClusterView(error="the probe did not answer within 60 s")
        return probe.parse_probe(out.stdout)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
        shutil.rmtree(self.root, ignore_errors=True)


PORT_NAMES = ("dashboard_port", "dashboard_agent_listen_port", "dashboard_agent_grpc_port",
              "runtime_env_agent_port", "metrics_export_port")  # fmt: skip


def _ports(ports: list[int]) -> dict[str, int]:
    return dict(zip(PORT_NAMES, ports, strict=True))


def start_node(
    root: Path,
    role: str,
    ip: str,
    head_ip: str,
    gcs_port: int,
    ports: list[int],
    *,
    faults: str = "",
) -> Node:
    state = root / role
    state.mkdir(parents=True, exist_ok=True)
    spec = nodes.RayNode(
        role=role, node_ip=ip, head_ip=head_ip, gcs_port=gcs_port, num_cpus=1,
        object_store_bytes=nodes.MIN_OBJECT_STORE_BYTES, ports=_ports(ports),
        temp_dir=str(root / "ray"),
        extra_env={"SPARKSIM_NODE_MEMINFO": str(state / "meminfo"),
                   "SPARKSIM_NODE_FAULTS": faults},
    )  # fmt: skip
    log = state / "ray.log"
    env = {**os.environ, **nodes.node_env(spec)}
    proc = subprocess.Popen(
        nodes.start_argv(spec, RAY), cwd=ROOT, env=env, stdout=log.open("w"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return Node(spec, proc, log, state / "meminfo")


def start_cluster(*, worker: bool = True, worker_faults: str = "", timeout: float = 90) -> Cluster:
    """The head, then (by default) the worker; returns once the probe sees every node
    alive with its GPU."""
    # A short path: Ray's unix sockets live under it (108 bytes at most).
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="rc", dir="/tmp")))
    # every port of both nodes at once: ports chosen one by one can repeat
    n = len(PORT_NAMES)
    gcs, *ports = nodes.free_ports(1 + 2 * n)
    try:
        cluster.nodes.append(start_node(cluster.root, "head", HEAD_IP, HEAD_IP, gcs, ports[:n]))
        if worker:
            cluster.nodes.append(
                start_node(
                    cluster.root, "worker", WORKER_IP, HEAD_IP, gcs, ports[n:], faults=worker_faults
                )
            )
        sides = {n.spec.role: n.spec.node_ip for n in cluster.nodes}
        deadline = time.monotonic() + timeout
        problem = "not probed"
        while time.monotonic() < deadline:
            for node in cluster.nodes:
                if node.proc.poll() is not None:
                    raise AssertionError(f"ray {node.spec.role} exited:\n{node.log()[-3000:]}")
            problem = probe.cluster_problem(cluster.view(), sides)
            if problem is None:
                return cluster
            time.sleep(1)
        raise AssertionError(f"the Ray cluster did not form: {problem}")
    except BaseException:
        cluster.stop()
        raise

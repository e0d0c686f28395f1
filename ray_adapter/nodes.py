"""The two Ray nodes of a pair run: the `ray start` vector of each side and its environment.

As NVIDIA's "Run on two Sparks" playbook does it: the head Spark starts `ray start --head`,
the worker Spark `ray start --address <head>:<port>`, each with its address on the ConnectX
link as Ray's node address and one GPU declared (`--num-gpus 1`: a Spark has one), NCCL and
Gloo pointed at the link's interface, and `VLLM_HOST_IP` set to the link address so vLLM's
ranks talk over the link. `--block` keeps `ray start` in the foreground: the node lives as
long as the process (or container) the engine manages, and dies with it.

Every port Ray would otherwise take at a fixed default (the GCS, the client server, the
dashboard agent) is given explicitly, so two nodes (two simulated Sparks, or a test's
cluster) can share one machine; the rest Ray picks itself.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from dataclasses import dataclass, field

HEAD, WORKER = "head", "worker"
ROLES = (HEAD, WORKER)
# Ray's smallest object store (it refuses less); the ranks pass no objects through it.
MIN_OBJECT_STORE_BYTES = 80 * 1000 * 1000


class RayNodeError(ValueError):
    """A node description Ray would refuse, or that would reach outside the pair."""


@dataclass(frozen=True)
class RayNode:
    """One side of a pair's Ray cluster."""

    role: str
    node_ip: str  # this Spark's address on the link
    head_ip: str  # the head's address on the link
    gcs_port: int  # the head's GCS port
    nccl_interface: str = ""  # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME; "" leaves NCCL's choice
    num_cpus: int | None = None  # None: all of the machine's
    object_store_bytes: int | None = None  # None: Ray's default (30 % of memory)
    # Explicit ports for the ones Ray fixes by default (client server 10001, dashboard 8265,
    # dashboard agent 52365): set when two nodes share a machine. Keys: ray_client_server_port,
    # dashboard_agent_listen_port, node_manager_port, object_manager_port.
    ports: dict[str, int] = field(default_factory=dict)
    temp_dir: str = ""  # Ray's session files; "" is Ray's /tmp/ray
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise RayNodeError(f"a Ray node is the head or the worker, not {self.role!r}")
        for name in ("node_ip", "head_ip"):
            try:
                ipaddress.ip_address(getattr(self, name))
            except ValueError:
                raise RayNodeError(f"{name} must be an IP address on the link") from None
        if not 1024 <= self.gcs_port <= 65535:
            raise RayNodeError("the GCS port must be between 1024 and 65535")
        for name, port in self.ports.items():
            if name not in _PORT_FLAGS or not 1024 <= int(port) <= 65535:
                raise RayNodeError(f"unknown or invalid Ray port {name}={port}")

    @property
    def head_address(self) -> str:
        return f"{self.head_ip}:{self.gcs_port}"


_PORT_FLAGS = {
    "ray_client_server_port": "--ray-client-server-port",
    "dashboard_port": "--dashboard-port",
    "dashboard_agent_listen_port": "--dashboard-agent-listen-port",
    "dashboard_agent_grpc_port": "--dashboard-agent-grpc-port",
    "node_manager_port": "--node-manager-port",
    "object_manager_port": "--object-manager-port",
    "runtime_env_agent_port": "--runtime-env-agent-port",
    "metrics_export_port": "--metrics-export-port",
}


_HEAD_ONLY = ("ray_client_server_port", "dashboard_port")


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports on this machine, for nodes that share it (a simulated
    pair, a test's cluster): every socket stays bound until all are chosen, because ports
    picked one at a time can repeat, and Ray refuses a node whose components share one."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def start_argv(node: RayNode, ray: str = "ray") -> list[str]:
    """`ray start` for this side, in the foreground (an argument vector, never a shell
    string)."""
    argv = [ray, "start", "--block", "--num-gpus", "1", "--node-ip-address", node.node_ip,
            "--disable-usage-stats"]  # fmt: skip
    if node.role == HEAD:
        argv += ["--head", "--port", str(node.gcs_port), "--include-dashboard=false"]
    else:
        argv += ["--address", node.head_address]
    if node.num_cpus is not None:
        argv += ["--num-cpus", str(node.num_cpus)]
    if node.object_store_bytes is not None:
        argv += ["--object-store-memory", str(max(node.object_store_bytes,
                                                  MIN_OBJECT_STORE_BYTES))]  # fmt: skip
    for name, port in sorted(node.ports.items()):
        if node.role == WORKER and name in _HEAD_ONLY:
            continue  # only the head runs the client server and the dashboard
        argv += [_PORT_FLAGS[name], str(port)]
    if node.temp_dir:
        argv += ["--temp-dir", node.temp_dir]
    return argv


def node_env(node: RayNode) -> dict[str, str]:
    """The environment of this side's node (and of what Ray starts there: vLLM's ranks)."""
    env = {"RAY_USAGE_STATS_ENABLED": "0", "VLLM_HOST_IP": node.node_ip}
    if node.nccl_interface:
        env["NCCL_SOCKET_IFNAME"] = node.nccl_interface
        env["GLOO_SOCKET_IFNAME"] = node.nccl_interface
    return {**env, **node.extra_env}


def server_env(head: RayNode) -> dict[str, str]:
    """What `vllm serve` on the head needs to join the cluster rather than start one."""
    env = node_env(head)
    env["RAY_ADDRESS"] = head.head_address
    return env

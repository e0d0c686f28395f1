"""Is the pair's Ray cluster whole? A probe run in the head's own environment (the image's
Python and Ray: the panel never imports Ray), and what a side's Ray log says went wrong.

The probe joins the cluster as a driver for a moment (`ray.init(address=…)`, then
`ray.nodes()`), prints one JSON line and leaves. `cluster_problem` judges it: a pair needs
both Sparks' nodes alive, at their link addresses, with one GPU each — the check the
head's worker makes before it starts `vllm serve`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# Run as `python -c PROBE_SOURCE <head address>`; prints {"ray": version, "nodes": [...]} or
# {"error": "..."} as its last line.
PROBE_SOURCE = """\
import json, socket, sys
host, _, port = sys.argv[1].rpartition(":")
try:
    socket.create_connection((host, int(port)), timeout=3).close()
except OSError as exc:
    print(json.dumps({"error": "nothing answers at %s (%s)" % (sys.argv[1], exc)}))
    sys.exit(0)
try:
    import ray
except ImportError as exc:
    print(json.dumps({"error": "Ray is not installed here: %s" % exc}))
    sys.exit(0)
try:
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False,
             configure_logging=False)
except Exception as exc:
    print(json.dumps({"error": "%s: %s" % (type(exc).__name__, exc)}))
    sys.exit(0)
nodes = [{"ip": n["NodeManagerAddress"], "alive": bool(n["Alive"]),
          "gpus": float(n.get("Resources", {}).get("GPU", 0))} for n in ray.nodes()]
print(json.dumps({"ray": ray.__version__, "nodes": nodes}))
ray.shutdown()
"""
MAX_OUTPUT = 65536  # a probe answer is a few hundred bytes; anything past this is ignored


def probe_argv(python: str, head_address: str) -> list[str]:
    return [python, "-c", PROBE_SOURCE, head_address]


@dataclass(frozen=True)
class Node:
    ip: str
    alive: bool
    gpus: float


@dataclass(frozen=True)
class ClusterView:
    nodes: tuple[Node, ...] = ()
    ray_version: str = ""
    error: str = ""  # the probe could not join the cluster (why, in Ray's words)


def parse_probe(output: str) -> ClusterView:
    """The probe's last JSON line (Ray may print warnings before it)."""
    for line in reversed(output[-MAX_OUTPUT:].splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(data, dict):
            continue
        if data.get("error"):
            return ClusterView(error=str(data["error"])[:500])
        nodes = tuple(
            Node(str(n.get("ip", "")), bool(n.get("alive")), float(n.get("gpus") or 0))
            for n in data.get("nodes", [])
            if isinstance(n, dict)
        )
        return ClusterView(nodes, str(data.get("ray", "")))
    tail = output.strip().splitlines()[-1:] or ["no output"]
    return ClusterView(error=f"the probe printed no answer ({tail[0][:200]})")


def cluster_problem(view: ClusterView, sides: dict[str, str]) -> str | None:
    """Why the cluster is not ready for a pair run (None when it is). `sides` maps each
    Spark's name to its link address."""
    if view.error:
        return f"the head's Ray cluster cannot be reached: {view.error}"
    alive = {n.ip: n for n in view.nodes if n.alive}
    missing = [name for name, ip in sides.items() if ip not in alive]
    if missing:
        seen = ", ".join(sorted(alive)) or "none"
        return (
            f"{' and '.join(missing)} {'has' if len(missing) == 1 else 'have'} not joined "
            f"the Ray cluster (alive nodes: {seen})"
        )
    no_gpu = [name for name, ip in sides.items() if alive[ip].gpus < 1]
    if no_gpu:
        return f"{' and '.join(no_gpu)} joined without a GPU"
    return None


# What a side's Ray log says, in Ray's own words, and what to do about it (first match).
_DIAGNOSES = (
    (
        "Version mismatch",
        "the two Sparks run different Ray (or Python) versions",
        "Both Sparks must run the same image (the same vLLM, so the same Ray): pull the "
        "recipe's image on both, or pin it by digest.",
    ),
    (
        "Unable to connect to GCS",
        "the worker Spark cannot reach the head's Ray over the link",
        "Check the ConnectX link (cable, `ip link` up on both), the pair's link addresses "
        "and that the head's Ray port is not blocked (docs/two-sparks.md).",
    ),
    (
        "Failed to connect to GCS",
        "the head's Ray cluster cannot be reached",
        "Check the head's link address and Ray port in the pair's settings, and that the "
        "head's Ray node started (its log above).",
    ),
    (
        "NCCL error",
        "NCCL could not talk over the link",
        "Check NCCL_SOCKET_IFNAME: the pair's NCCL interface must be the ConnectX "
        "interface on both Sparks (`ip -br addr`), with the same MTU on both ends.",
    ),
    (
        "Address already in use",
        "a port Ray needs is taken on this Spark",
        "Another Ray (or other server) holds the port: stop it, or give the pair another Ray port.",
    ),
)


# Ray's check_version_info message (ray/_private/utils.py), as a joining node prints it.
_VERSIONS = re.compile(
    r"The cluster was started with:\s+Ray: (\S+)\s+Python: (\S+)\s+"
    r"This process on node \S+ was started with:\s+Ray: (\S+)\s+Python: (\S+)"
)


def diagnose(lines: list[str]) -> tuple[str, str] | None:
    """(reason, advice) for the first known Ray failure in a node's log lines."""
    text = "\n".join(lines[-400:])
    for needle, reason, advice in _DIAGNOSES:
        if needle in text:
            versions = _VERSIONS.search(text) if needle == "Version mismatch" else None
            if versions:
                ray_head, py_head, ray_here, py_here = versions.groups()
                reason += (
                    f": the head's cluster runs Ray {ray_head} (Python {py_head}), this "
                    f"Spark's node Ray {ray_here} (Python {py_here})"
                )
            return reason, advice
    return None

"""ray_adapter: the `ray start` vector of each side of a pair, its environment, the probe's
answer and the judgement of it, and Ray's failures in words a user can act on. The vector
and the probe are also used for real in tests/raycluster.py (a two-node cluster)."""

from __future__ import annotations

import pytest

from ray_adapter import nodes, probe


def _node(role: str = "head", **kwargs) -> nodes.RayNode:
    fields = {"role": role, "node_ip": "192.168.100.10" if role == "head" else "192.168.100.11",
              "head_ip": "192.168.100.10", "gcs_port": 6379, "nccl_interface": "enp1s0f1np1"}  # fmt: skip
    return nodes.RayNode(**{**fields, **kwargs})


def test_the_head_starts_a_cluster_with_one_gpu_on_its_link_address():
    argv = nodes.start_argv(_node(), "/venv/bin/ray")
    assert argv[:3] == ["/venv/bin/ray", "start", "--block"]
    assert argv[argv.index("--num-gpus") + 1] == "1"
    assert argv[argv.index("--node-ip-address") + 1] == "192.168.100.10"
    assert argv[argv.index("--head") + 1 :][:2] == ["--port", "6379"]
    assert "--address" not in argv


def test_the_worker_joins_the_head_over_the_link():
    argv = nodes.start_argv(_node("worker", ports={"ray_client_server_port": 20001,
                                                   "dashboard_agent_listen_port": 20002}))  # fmt: skip
    assert argv[argv.index("--address") + 1] == "192.168.100.10:6379"
    assert argv[argv.index("--node-ip-address") + 1] == "192.168.100.11"
    assert "--head" not in argv and "--ray-client-server-port" not in argv
    assert argv[argv.index("--dashboard-agent-listen-port") + 1] == "20002"


def test_nccl_and_vllm_are_pointed_at_the_link():
    env = nodes.node_env(_node("worker"))
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert env["VLLM_HOST_IP"] == "192.168.100.11"
    assert nodes.server_env(_node())["RAY_ADDRESS"] == "192.168.100.10:6379"
    assert "NCCL_SOCKET_IFNAME" not in nodes.node_env(_node(nccl_interface=""))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"role": "driver"}, "the head or the worker"),
        ({"node_ip": "spark-2; rm -rf /"}, "node_ip must be an IP address"),
        ({"gcs_port": 80}, "between 1024 and 65535"),
        ({"ports": {"anything": 3000}}, "unknown or invalid Ray port"),
    ],
)
def test_a_node_the_panel_would_not_start_is_refused(fields, message):
    with pytest.raises(nodes.RayNodeError, match=message):
        _node(**fields)


def test_the_object_store_is_never_below_what_ray_accepts():
    argv = nodes.start_argv(_node(object_store_bytes=1000))
    assert argv[argv.index("--object-store-memory") + 1] == str(nodes.MIN_OBJECT_STORE_BYTES)


def test_free_ports_are_distinct():
    """Every socket is held until all are chosen: two nodes' many ports never repeat (the
    simulated pair, apps/runs/pair.py, and the tests' cluster, tests/raycluster.py)."""
    ports = nodes.free_ports(12)
    assert len(set(ports)) == 12 and all(1024 <= p <= 65535 for p in ports)


SIDES = {"spark-1": "192.168.100.10", "spark-2": "192.168.100.11"}


def _answer(*nodes_: tuple[str, bool, float]) -> str:
    rows = ", ".join(f'{{"ip": "{ip}", "alive": {str(a).lower()}, "gpus": {g}}}'
                     for ip, a, g in nodes_)  # fmt: skip
    return f'WARNING something Ray printed first\n{{"ray": "2.60.0", "nodes": [{rows}]}}\n'


def test_a_whole_pair_is_two_live_nodes_with_a_gpu_each():
    view = probe.parse_probe(_answer(("192.168.100.10", True, 1), ("192.168.100.11", True, 1)))
    assert view.ray_version == "2.60.0" and len(view.nodes) == 2
    assert probe.cluster_problem(view, SIDES) is None


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (_answer(("192.168.100.10", True, 1)), "spark-2 has not joined the Ray cluster"),
        (
            _answer(("192.168.100.10", True, 1), ("192.168.100.11", False, 1)),
            "spark-2 has not joined",
        ),
        (
            _answer(("192.168.100.10", True, 1), ("192.168.100.11", True, 0)),
            "spark-2 joined without a GPU",
        ),
        (_answer(("10.0.0.5", True, 1)), "spark-1 and spark-2 have not joined"),
        ('{"error": "nothing answers at 192.168.100.10:6379"}', "cannot be reached: nothing"),
        ("Traceback (most recent call last):\n  boom", "printed no answer (  boom)"),
    ],
)
def test_what_is_missing_from_a_pair_is_named(answer, problem):
    assert problem in probe.cluster_problem(probe.parse_probe(answer), SIDES)


def test_probe_is_an_argument_vector_with_the_address_last():
    argv = probe.probe_argv("/usr/bin/python3", "192.168.100.10:6379")
    assert argv[0] == "/usr/bin/python3" and argv[1] == "-c" and argv[-1] == "192.168.100.10:6379"
    compile(argv[2], "probe", "exec")  # valid Python


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            "RuntimeError: Version mismatch: The cluster was started with:\n    Ray: 2.49.0",
            "different Ray",
        ),
        (
            "Unable to connect to GCS (ray head) at 192.168.100.10:6379. Check that ...",
            "cannot reach the head's Ray over the link",
        ),
        (
            "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "NCCL could not talk over the link",
        ),
    ],
)
def test_ray_failures_become_reasons_with_advice(line, reason):
    found = probe.diagnose(["starting", line])
    assert found is not None and reason in found[0] and found[1]
    assert probe.diagnose(["all good"]) is None


def test_a_version_mismatch_names_both_versions():
    # Ray 2.59's joining node against a 2.60 head, as it printed it here
    # (tests/runs/test_pair_runs.py produces it for real).
    lines = [
        '  File ".../ray/_private/utils.py", line 1440, in check_version_info',
        "    raise RuntimeError(error_message)",
        "RuntimeError: Version mismatch: The cluster was started with:",
        "    Ray: 2.60.0",
        "    Python: 3.11.7",
        "This process on node 192.0.2.2 was started with:",
        "    Ray: 2.59.0",
        "    Python: 3.11.7",
    ]
    reason, advice = probe.diagnose(lines)
    assert reason == (
        "the two Sparks run different Ray (or Python) versions: the head's cluster runs Ray "
        "2.60.0 (Python 3.11.7), this Spark's node Ray 2.59.0 (Python 3.11.7)"
    )
    assert "same image" in advice

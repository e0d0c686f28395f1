"""ray_adapter.link: each side's end of the pair's link, read from this machine's kernel
(the check runs for real here: interfaces, operstate, flags, MTU, addresses) and judged
into the failures the issue names — NCCL interface wrong, link down — with advice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ray_adapter import link


def _check(interface: str, address: str) -> str:
    done = subprocess.run(link.link_argv(sys.executable, interface, address),
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_loopback_holds_a_simulated_pairs_addresses_at_its_own_mtu():
    mtu = int(Path("/sys/class/net/lo/mtu").read_text())
    for address in ("127.0.0.2", "127.0.0.3"):
        output = _check("lo", address)
        assert link.link_problem(output, "lo", address, mtu) is None
        assert link.link_problem(output, "lo", address, None) is None
    problem = link.link_problem(_check("lo", "127.0.0.2"), "lo", "127.0.0.2", 9000)
    assert problem.kind == "mtu"
    assert f"its lo has MTU {mtu}, the pair expects 9000" in problem.reason
    assert "same MTU" in problem.advice


def test_an_nccl_interface_this_spark_lacks_is_named_with_the_ones_it_has():
    problem = link.link_problem(_check("enp1s0f1np1", "127.0.0.2"), "enp1s0f1np1",
                                "127.0.0.2")  # fmt: skip
    assert problem.kind == "missing"
    assert "there is no interface enp1s0f1np1 (the pair's NCCL interface)" in problem.reason
    assert "lo" in problem.reason.partition("it has: ")[2]
    assert "ConnectX interface's name" in problem.advice


def test_without_an_interface_the_link_address_must_be_one_of_this_sparks():
    assert link.link_problem(_check("", "127.0.0.3"), "", "127.0.0.3") is None
    # TEST-NET-2: never assigned here, and nothing is sent to it (a bind is refused)
    problem = link.link_problem(_check("", "198.51.100.7"), "", "198.51.100.7")
    assert problem.kind == "address"
    assert "no interface of this Spark has its link address 198.51.100.7" in problem.reason


def test_an_interface_whose_other_end_is_down_is_a_link_down(veth_link):
    near = veth_link.near
    problem = link.link_problem(_check(near, "127.0.0.2"), near, "127.0.0.2")
    assert (problem.kind, problem.reason) == ("down", f"the link is down: its {near} is set "
                                                      f"down (`ip link set {near} up`)")  # fmt: skip
    veth_link.set(near, "up")  # up here, the cable's other end still down: no carrier
    problem = link.link_problem(_check(near, "127.0.0.2"), near, "127.0.0.2")
    assert problem.kind == "down"
    assert "has no carrier (lowerlayerdown" in problem.reason
    assert "check the cable" in problem.advice


def test_an_interface_that_is_up_but_not_the_links_is_the_wrong_nccl_interface(veth_link):
    veth_link.set(veth_link.near, "up")
    veth_link.set(veth_link.far, "up")
    near = veth_link.near
    problem = link.link_problem(_check(near, "127.0.0.2"), near, "127.0.0.2")
    assert problem.kind == "address"
    assert f"its link address 127.0.0.2 is not on {near}; {near} has no IPv4 address" == (
        problem.reason
    )


@pytest.mark.parametrize("output", ["", "Traceback (most recent call last):\nOSError: x"])
def test_a_check_that_printed_no_answer_says_so_with_its_output(output):
    problem = link.link_problem(output, "lo", "127.0.0.2")
    assert problem.kind == "unknown"
    assert "the link check printed no answer" in problem.reason

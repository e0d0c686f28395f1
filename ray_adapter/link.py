"""Is this Spark's end of the pair's link usable? Checked on each side before its Ray node
starts, where the node will run: the Spark's own network namespace (the process engine's
worker runs on the Spark; the Docker engine runs the check in a throwaway container of
the run's image on the host's network — a worker in a Compose container sees only its
own network, not the Spark's).

The check (`LINK_SOURCE`, stdlib only, so any vLLM image's Python runs it) reads what the
kernel says — the interfaces, the NCCL interface's state, flags, MTU and IPv4 addresses,
whether the side's link address is local — and prints one JSON line. `link_problem`
judges it: each failure is one of the kinds the issue names, with the advice for it.

  missing    the NCCL interface does not exist here          (NCCL interface wrong)
  down       it exists but has no link (down, no carrier)    (link down)
  address    the side's link address is not on it / not here (NCCL interface or address wrong)
  mtu        its MTU is not the pair's expected MTU
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass

# Run as `python -c LINK_SOURCE <interface or ""> <link address>`; the last line it prints
# is {"interfaces": [...], "interface": {...} | null, "local": bool}.
LINK_SOURCE = r"""
import array, fcntl, json, socket, struct, sys
name, address = sys.argv[1], sys.argv[2]

def sysfs(key):
    try:
        with open("/sys/class/net/%s/%s" % (name, key)) as f:
            return f.read().strip()
    except OSError:
        return None

def ipv4_addresses():
    # SIOCGIFCONF: every IPv4 address and the interface holding it
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    size, step = 40 * 256, 40
    buf = array.array("B", bytes(size))
    got = struct.unpack("iL", fcntl.ioctl(
        s.fileno(), 0x8912, struct.pack("iL", size, buf.buffer_info()[0])))[0]
    data, found = buf.tobytes()[:got], []
    for i in range(0, got, step):
        label = data[i:i + 16].split(b"\0", 1)[0].decode(errors="replace")
        found.append((label.split(":")[0], socket.inet_ntoa(data[i + 20:i + 24])))
    s.close()
    return found

def is_local(address):
    # an address this machine can bind is one of its own (or loopback's 127/8)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False

local = is_local(address)
held = ipv4_addresses()
answer = {"interfaces": sorted(n for _, n in socket.if_nameindex()), "local": local,
          "holders": sorted({i for i, a in held if a == address}), "interface": None}
if name and sysfs("operstate") is not None:
    answer["interface"] = {
        "operstate": sysfs("operstate"), "flags": int(sysfs("flags") or "0", 16),
        "mtu": int(sysfs("mtu") or 0), "carrier": sysfs("carrier"),
        "ipv4": sorted(a for i, a in held if i == name)}
print(json.dumps(answer))
"""
MAX_OUTPUT = 65536
IFF_UP, IFF_LOOPBACK = 0x1, 0x8
# The kernel's operstates (RFC 2863) that mean "no link": an interface an admin set down,
# or one whose cable/peer is gone (lowerlayerdown, notpresent, dormant).
_NO_LINK = ("down", "lowerlayerdown", "notpresent", "dormant")

ADVICE = {
    "missing": "The pair's NCCL interface must be the ConnectX interface's name, the same "
    "on both Sparks (`ip -br addr` on each shows it, e.g. enp1s0f1np1): correct it in the "
    "pair's settings (docs/two-sparks.md).",
    "down": "The link is down: check the cable between the Sparks' ConnectX ports and "
    "bring the interface up on both (`ip link set <if> up`, and in netplan to keep it).",
    "address": "Each Spark's link address must be an address of its NCCL interface "
    "(`ip -br addr`): correct the pair's link addresses or its NCCL interface.",
    "mtu": "Set the same MTU on both Sparks' ConnectX interfaces (`ip link set <if> mtu "
    "9000`, and in netplan to keep it), or correct the pair's expected MTU "
    "(docs/two-sparks.md).",
    "unknown": "The link check could not run on this Spark (its output above).",
}


def link_argv(python: str, interface: str, address: str) -> list[str]:
    return [python, "-c", LINK_SOURCE, interface, address]


@dataclass(frozen=True)
class LinkProblem:
    kind: str  # a key of ADVICE
    reason: str

    @property
    def advice(self) -> str:
        return ADVICE[self.kind]


def _answer(output: str) -> dict | None:
    for line in reversed(output[-MAX_OUTPUT:].splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and isinstance(data.get("interfaces"), list):
                return data
    return None


def _on_loopback(flags: int, address: str) -> bool:
    """The loopback interface answers for its whole 127/8 (a simulated pair's addresses)."""
    try:
        return bool(flags & IFF_LOOPBACK) and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def link_problem(
    output: str, interface: str, address: str, expected_mtu: int | None = None
) -> LinkProblem | None:
    """What is wrong with this side's end of the link, judged from LINK_SOURCE's output
    (None when nothing is)."""
    data = _answer(output)
    if data is None:
        tail = (output.strip().splitlines() or ["no output"])[-1][:200]
        return LinkProblem("unknown", f"the link check printed no answer ({tail})")
    names = ", ".join(str(n) for n in data["interfaces"][:20]) or "none"
    if not interface:  # NCCL picks the interface itself: the address must be here
        if not data.get("local"):
            return LinkProblem(
                "address", f"no interface of this Spark has its link address {address} "
                f"(it has: {names}) — is the link up and the address right?",
            )  # fmt: skip
        return None
    info = data.get("interface")
    if not isinstance(info, dict):
        return LinkProblem(
            "missing", f"there is no interface {interface} (the pair's NCCL interface) on "
            f"this Spark (it has: {names})",
        )  # fmt: skip
    flags = int(info.get("flags") or 0)
    state = str(info.get("operstate") or "")
    if not flags & IFF_UP or state in _NO_LINK:
        why = (
            f"is set down (`ip link set {interface} up`)"
            if not flags & IFF_UP
            else f"has no carrier ({state}: the cable, or the other Spark's end, is down)"
        )
        return LinkProblem("down", f"the link is down: its {interface} {why}")
    ipv4 = [str(a) for a in info.get("ipv4") or []]
    if address not in ipv4 and not _on_loopback(flags, address):
        holders = [str(h) for h in data.get("holders") or []]
        where = f" (it is on {', '.join(holders)})" if holders else ""
        has = ", ".join(ipv4) or "no IPv4 address"
        return LinkProblem(
            "address", f"its link address {address} is not on {interface}{where}; "
            f"{interface} has {has}",
        )  # fmt: skip
    mtu = int(info.get("mtu") or 0)
    if expected_mtu and mtu != expected_mtu:
        return LinkProblem(
            "mtu", f"its {interface} has MTU {mtu}, the pair expects {expected_mtu}: both "
            "ends of the link need the same MTU",
        )  # fmt: skip
    return None

"""Where the panel may send a request a user chose the address of (webhooks): the address
policy, with no Django in it.

A URL passes when its scheme is http or https, its port is 80, 443 or unprivileged
(1024–65535), and *every* address its host resolves to is public. Never allowed: loopback
(the panel itself, its Redis, other local services), link-local (cloud metadata at
169.254.169.254, fe80::/10), unspecified (0.0.0.0 and :: reach this machine), multicast,
broadcast and reserved addresses. Private and other non-public addresses (10/8, 172.16/12,
192.168/16, 100.64/10, fc00::/7, …) are refused too unless they lie in a network the admin
allows (settings.WEBHOOK_ALLOWED_NETWORKS); loopback can be allowed the same way, which is
for development and tests only.

IPv6 forms that carry an IPv4 address (::ffff:a.b.c.d, 6to4, Teredo, NAT64 64:ff9b::/96) are
judged by that IPv4 address as well, and odd IPv4 spellings (2130706433, 0x7f.1, 127.1)
are judged by what the resolver makes of them, since the check works on resolved addresses.

`resolve_checked` resolves a name once and returns the checked addresses; the caller
connects to one of those (never to the name again), so a DNS answer that changes between
the check and the connection (DNS rebinding) cannot move the request inside.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
# Below 1024 only the web's own ports: no SSH, SMTP, LDAP, … on a receiver's host.
LOW_PORTS_ALLOWED = frozenset({80, 443})
# Names that are loopback by definition (RFC 6761), refused without asking a resolver.
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
BROADCAST = ipaddress.ip_address("255.255.255.255")


class Refused(ValueError):
    """The destination is not allowed; `reason` says why in words a user understands
    (never what the destination answered: nothing was sent)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Unresolved(OSError):
    """The name did not resolve (now): worth trying again later."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as in the URL, lower case, IPv6 without brackets
    port: int

    @property
    def is_literal(self) -> bool:
        return _literal(self.host) is not None


def parse_networks(values: Iterable[str]) -> list[Network]:
    """`WEBHOOK_ALLOWED_NETWORKS` entries (CIDR, or a single address) as networks; a bad
    entry raises ValueError naming it."""
    networks = []
    for value in values:
        value = value.strip()
        if not value:
            continue
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ValueError(f"WEBHOOK_ALLOWED_NETWORKS: {value!r} is not a network") from None
    return networks


def check_url(url: str) -> Target:
    """The URL's scheme, host and port, or Refused. Resolves nothing."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused("the URL's host or port is not valid") from None
    scheme = (parts.scheme or "").lower()
    if scheme not in SCHEMES:
        raise Refused("only http:// and https:// URLs")
    if parts.username is not None or parts.password is not None:
        raise Refused("no credentials in the URL")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise Refused("the URL needs a host")
    port = DEFAULT_PORTS[scheme] if port is None else port
    if not 0 < port < 65536:
        raise Refused(f"port {port} is not valid")
    if port < 1024 and port not in LOW_PORTS_ALLOWED:
        raise Refused(f"port {port}: only 80, 443 or 1024–65535")
    return Target(scheme=scheme, host=host, port=port)


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _embedded_ipv4(address: Address) -> list[Address]:
    if address.version != 6:
        return []
    found = [address.ipv4_mapped, address.sixtofour]
    if address.teredo:
        found.extend(address.teredo)
    if address in NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [a for a in found if a is not None]


def _kind(address: Address) -> str | None:
    """What is wrong with one address, judged alone: None when it is public."""
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved or address == BROADCAST:
        return "reserved"
    if not address.is_global:
        return "private"
    return None


# Kinds an admin can allow by listing a network; the others are never allowed.
ALLOWABLE = frozenset({"loopback", "private"})


def address_problem(address: Address | str, allowed: Iterable[Network] = ()) -> str | None:
    """Why `address` is refused ("loopback", "link-local", "private", …), or None."""
    if isinstance(address, str):
        try:
            address = ipaddress.ip_address(address)
        except ValueError:
            return "not an IP address"
    allowed = list(allowed)
    # The IPv4 address an IPv6 one carries first: its kind is the telling reason.
    for candidate in (*_embedded_ipv4(address), address):
        kind = _kind(candidate)
        if kind is None:
            continue
        if kind in ALLOWABLE and any(
            candidate.version == net.version and candidate in net for net in allowed
        ):
            continue
        return kind
    return None


def _reason(target: Target, kind: str, address: Address | None = None) -> str:
    what = {
        "unspecified": "an unspecified address",
        "loopback": "a loopback address (this machine)",
        "link-local": "a link-local address (e.g. cloud metadata)",
        "multicast": "a multicast address",
        "reserved": "a reserved address",
        "private": "a private address (not allowed by WEBHOOK_ALLOWED_NETWORKS)",
        "not an IP address": "something that is not an IP address",
    }.get(kind, kind)
    if target.is_literal:
        return f"{target.host} is {what}"
    # The addresses a name resolves to stay unsaid: a member could map internal names.
    return f"{target.host} resolves to {what}"


def check_literal(target: Target, allowed: Iterable[Network] = ()) -> None:
    """Refused when the host is an IP address (or a loopback name) that is not allowed;
    other names pass (they are checked when resolved)."""
    address = _literal(target.host)
    if address is None:
        if target.host in LOOPBACK_NAMES or target.host.endswith(".localhost"):
            address = ipaddress.ip_address("127.0.0.1")
        else:
            return
    if kind := address_problem(address, allowed):
        raise Refused(_reason(target, kind))


def resolve_checked(target: Target, allowed: Iterable[Network] = ()) -> list[Address]:
    """Every address the host resolves to, checked: Refused if any one is not allowed,
    Unresolved if there are none. Connect to these, never to the name again."""
    allowed = list(allowed)
    check_literal(target, allowed)
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Unresolved(f"{target.host} does not resolve") from exc
    addresses: list[Address] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        text = str(sockaddr[0]).split("%", 1)[0]  # an IPv6 scope id
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            raise Refused(_reason(target, "not an IP address")) from None
        if kind := address_problem(address, allowed):
            raise Refused(_reason(target, kind))
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise Unresolved(f"{target.host} does not resolve")
    return addresses


def check(url: str, allowed: Iterable[Network] = (), *, resolve: bool = True) -> Target:
    """`check_url` plus the address checks (with resolution unless resolve=False)."""
    target = check_url(url)
    if resolve:
        resolve_checked(target, allowed)
    else:
        check_literal(target, allowed)
    return target

"""Issue 17, class 6: a member's webhook cannot make the panel send requests inside.

Every refused destination is refused *before any connection*: each test records every
`connect` a socket makes while the delivery runs, and a real listening socket on the
refused loopback port receives nothing. Names are resolved once and the connection goes to
the checked address (a DNS answer that changes afterwards cannot move it). Only loopback is
ever connected to; a "public" address in these tests meets a stubbed connect.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from apps.api import egress, webhooks
from apps.api.models import Webhook, WebhookDelivery
from apps.api.tasks import deliver

pytestmark = pytest.mark.django_db

PUBLIC = "93.184.216.34"  # looks public; never connected to (connect is stubbed)
REAL_GETADDRINFO = socket.getaddrinfo


@pytest.fixture(autouse=True)
def policy(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.WEBHOOK_ALLOWED_NETWORKS = []  # the default: public addresses only
    settings.WEBHOOK_RETRY_DELAYS = [0]
    return settings


def _loopback(address) -> bool:
    if isinstance(address, str | bytes):  # a Unix socket
        return True
    try:
        return ipaddress.ip_address(str(address[0]).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def connects(monkeypatch) -> list:
    """Every address a socket connects to from now on. Loopback connections happen; any
    other is refused here, so that even a broken policy sends nothing off this machine."""
    seen: list = []
    original = socket.socket.connect

    def record(self, address):
        seen.append(address)
        if not _loopback(address):
            raise ConnectionRefusedError(111, "test guard: only loopback is ever connected to")
        return original(self, address)

    monkeypatch.setattr(socket.socket, "connect", record)
    return seen


@pytest.fixture
def names(monkeypatch):
    """A resolver for made-up names: `names["x.test"] = [[first answer], [later answers]]`;
    every other name goes to the real resolver. `names.calls` counts lookups per name."""

    class Names(dict):
        calls: dict[str, int] = {}

    table = Names()
    table.calls = {}

    def getaddrinfo(host, port, *args, **kwargs):
        host_text = host.decode() if isinstance(host, bytes) else host
        if host_text not in table:
            return REAL_GETADDRINFO(host, port, *args, **kwargs)
        n = table.calls[host_text] = table.calls.get(host_text, 0) + 1
        answers = table[host_text]
        answer = answers[min(n, len(answers)) - 1]
        return [
            (socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "",
             (ip, int(port or 0)) if ":" not in ip else (ip, int(port or 0), 0, 0))
            for ip in answer
        ]  # fmt: skip

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


@pytest.fixture
def no_retry(monkeypatch):
    calls: list = []
    monkeypatch.setattr(webhooks.delivery, "_schedule", lambda pk, countdown: calls.append(pk))
    return calls


class Listener:
    """A listening socket that nobody should connect to."""

    def __init__(self, host="127.0.0.1", port=0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]

    def received_nothing(self) -> bool:
        self.sock.settimeout(0.2)
        try:
            conn, _ = self.sock.accept()
        except TimeoutError:
            return True
        conn.close()
        return False

    def close(self):
        self.sock.close()


@pytest.fixture
def listener():
    sock = Listener()
    yield sock
    sock.close()


class Receiver:
    """A real HTTP server on loopback that records what it receives."""

    def __init__(self, host="127.0.0.1", port=0, tls: ssl.SSLContext | None = None):
        self.requests: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append({"headers": dict(self.headers), "body": body})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _redis_port() -> int:
    return urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")).port or 6379


def _not_redis(connects: list) -> list:
    return [c for c in connects if tuple(c[:2]) != ("127.0.0.1", _redis_port())]


def _send(user, url: str) -> WebhookDelivery:
    """A webhook stored as it is (as if added before the policy, or by the admin), one
    delivery attempted."""
    hook = Webhook.objects.create(user=user, url=url, secret="s3cret", events=["incident"])
    delivery = WebhookDelivery.objects.create(webhook=hook, event="ping", payload={"n": 1})
    deliver.apply(args=[delivery.pk])
    delivery.refresh_from_db()
    return delivery


INTERNAL = [
    ("http://127.0.0.1:{redis}/", "loopback"),
    ("http://localhost:8000/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://[::ffff:127.0.0.1]:8080/", "loopback"),  # IPv4-mapped loopback
    ("http://2130706433:8080/", "loopback"),  # 127.0.0.1 spelt as one number
    ("http://0x7f.1:8080/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://[fe80::1]:8080/", "link-local"),
    ("http://0.0.0.0:8000/", "unspecified"),
    ("http://224.0.0.1:8080/", "multicast"),
    ("http://240.0.0.1:8080/", "reserved"),
    ("http://10.0.0.1/", "private"),
    ("http://192.168.1.20:8080/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://100.64.0.1/", "private"),  # carrier-grade NAT
    ("http://[fd00::1]/", "private"),
    ("http://[64:ff9b::a00:1]/", "private"),  # NAT64 of 10.0.0.1
    ("https://intranet.test/", "private"),  # resolves to 10.1.2.3 (see below)
    ("https://sneaky.test/", "loopback"),  # resolves to a public and a loopback address
]


@pytest.mark.parametrize("url, kind", INTERNAL)
def test_internal_targets_are_refused_before_any_connection(
    member, url, kind, names, connects, no_retry
):
    names["intranet.test"] = [["10.1.2.3"]]
    names["sneaky.test"] = [[PUBLIC, "127.0.0.1"]]
    delivery = _send(member, url.format(redis=_redis_port()))
    assert connects == []  # not one socket connected, to anything
    assert delivery.state == "failed" and delivery.attempts == 1  # refused for good: no retry
    assert delivery.status_code is None and no_retry == []
    assert delivery.error.startswith("refused: ")
    expected = egress._reason(egress.check_url(url.format(redis=_redis_port())), kind)
    assert delivery.error == f"refused: {expected}"


def test_a_loopback_port_that_listens_receives_nothing(member, listener, connects, no_retry):
    delivery = _send(member, f"http://127.0.0.1:{listener.port}/hook")
    assert listener.received_nothing() and connects == []
    assert delivery.error == "refused: 127.0.0.1 is a loopback address (this machine)"
    delivery = _send(member, f"http://localhost:{listener.port}/hook")
    assert listener.received_nothing() and connects == []
    assert delivery.error.startswith("refused: localhost")


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://example.com:22/", "port 22"),
        ("http://example.com:25/", "port 25"),
        ("gopher://example.com/", "only http:// and https://"),
        ("file:///etc/passwd", "only http:// and https://"),
        ("http://user:pw@example.com/", "no credentials"),
    ],
)
def test_other_schemes_ports_and_credentials_are_refused(member, url, why, connects, names):
    names["example.com"] = [[PUBLIC]]
    delivery = _send(member, url)
    assert connects == [] and delivery.state == "failed"
    assert delivery.error.startswith("refused: ") and why in delivery.error


def test_the_log_says_only_refused_never_what_answered(member, listener, connects):
    """Even for a loopback port that would answer, the delivery log holds the reason and
    nothing a target could have said (no status, no reason phrase, no error text)."""
    server = Receiver()
    try:
        delivery = _send(member, f"http://127.0.0.1:{server.port}/")
    finally:
        server.close()
    assert server.requests == [] and connects == []
    assert (delivery.status_code, delivery.error) == (
        None, "refused: 127.0.0.1 is a loopback address (this machine)")  # fmt: skip


# --- the form --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/",
        "http://localhost:8000/",
        "http://[::1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "https://intranet.test/hook",
        "http://example.com:22/",
    ],
)
def test_the_form_refuses_internal_targets_with_a_clear_error(
    client_as, member, url, names, connects
):
    names["intranet.test"] = [["10.1.2.3"]]
    names["example.com"] = [[PUBLIC]]
    response = client_as(member).post(
        "/accounts/profile/webhooks/", {"url": url, "events": ["incident"]}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "Refused: " in html and not Webhook.objects.exists()
    assert _not_redis(connects) == []  # (the page itself asks the panel's Redis)


def test_an_admin_allowed_network_is_accepted_by_the_form(client_as, member, policy, connects):
    policy.WEBHOOK_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    response = client_as(member).post(
        "/accounts/profile/webhooks/", {"url": "http://10.0.0.1:8080/hook", "events": ["incident"]}
    )
    assert response.status_code == 302 and Webhook.objects.get().url == "http://10.0.0.1:8080/hook"
    assert _not_redis(connects) == []  # adding one connects to nothing
    # Allowing a network never allows link-local (metadata) or a loopback outside it.
    policy.WEBHOOK_ALLOWED_NETWORKS = ["0.0.0.0/0", "::/0"]
    for url in ("http://169.254.169.254/", "http://0.0.0.0:8000/", "http://[fe80::1]:8080/"):
        response = client_as(member).post(
            "/accounts/profile/webhooks/", {"url": url, "events": ["incident"]}
        )
        assert response.status_code == 400, url


def test_a_bad_allowed_network_is_a_startup_error(policy):
    from apps.api.apps import check_webhook_networks

    policy.WEBHOOK_ALLOWED_NETWORKS = ["10.0.0.0/8", "lan"]
    [error] = check_webhook_networks()
    assert error.id == "api.E001" and "'lan'" in error.msg
    policy.WEBHOOK_ALLOWED_NETWORKS = ["10.0.0.0/8", "fd00::/8"]
    assert check_webhook_networks() == []


# --- resolution pinned ------------------------------------------------------------------------


def test_an_allowed_loopback_receiver_gets_the_delivery(member, policy, no_retry):
    """The positive control: with 127.0.0.0/8 allowed (development), a real local server
    receives the signed delivery."""
    policy.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    server = Receiver()
    try:
        delivery = _send(member, f"http://127.0.0.1:{server.port}/hook")
    finally:
        server.close()
    assert delivery.state == "delivered" and delivery.status_code == 200
    [request] = server.requests
    assert request["headers"]["X-SparkPanel-Signature"].startswith("sha256=")


def test_a_rebinding_name_connects_to_the_address_that_was_checked(
    member, policy, names, connects, no_retry
):
    """First answer allowed (127.0.0.1, the one allowed address), every later answer not
    (127.0.0.2): the request reaches the first, with the name in its Host header, and the
    name is looked up once."""
    policy.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    server = Receiver()
    other = Listener("127.0.0.2", server.port)
    names["rebind.test"] = [["127.0.0.1"], ["127.0.0.2"]]
    try:
        delivery = _send(member, f"http://rebind.test:{server.port}/hook")
        assert other.received_nothing()
    finally:
        server.close()
        other.close()
    assert names.calls["rebind.test"] == 1
    assert delivery.state == "delivered", delivery.error
    [request] = server.requests
    assert request["headers"]["Host"] == f"rebind.test:{server.port}"
    assert [c[0] for c in connects] == ["127.0.0.1"]


def test_a_public_first_answer_is_pinned_and_a_later_loopback_answer_unused(
    member, names, monkeypatch, no_retry
):
    """A public first answer, loopback afterwards: the one connection goes to the public
    address checked (stubbed here: nothing leaves the machine), never to loopback."""
    names["rebind.test"] = [[PUBLIC], ["127.0.0.1"]]
    attempted: list = []

    def fake_connect(address, *args, **kwargs):
        attempted.append(address)
        raise ConnectionRefusedError(111, "stubbed: no traffic leaves the test machine")

    monkeypatch.setattr(socket, "create_connection", fake_connect)
    delivery = _send(member, "http://rebind.test:8080/hook")
    assert attempted == [(PUBLIC, 8080)]
    assert names.calls["rebind.test"] == 1
    assert delivery.state == "pending" and not delivery.error.startswith("refused")
    assert no_retry == [delivery.pk]  # an ordinary failure: tried again later


def test_a_name_that_does_not_resolve_is_retried_not_refused(member, names, connects, no_retry):
    names["gone.test"] = [[]]
    delivery = _send(member, "https://gone.test/hook")
    assert connects == [] and delivery.state == "pending"
    assert delivery.error == "gone.test does not resolve" and no_retry == [delivery.pk]


def test_redirects_are_not_followed(member, policy, no_retry):
    """A public receiver could redirect to 127.0.0.1: redirects are never followed (a
    loopback receiver allowed here stands in for it)."""
    policy.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            hits.append(self.path)
            self.send_response(307)
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        delivery = _send(member, f"http://127.0.0.1:{server.server_address[1]}/hook")
    finally:
        server.shutdown()
        server.server_close()
    assert hits == ["/hook"] and delivery.status_code == 307
    assert "not followed" in delivery.error


# --- https: pinned address, certificate checked against the name -----------------------------


def _tls_pair(tmp_path, name: str):
    """A CA and a server certificate for `name`, made with cryptography; returns
    (server SSLContext, CA bundle path)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    ca_path, cert_path, key_path = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context, str(ca_path)


@pytest.mark.parametrize("cert_name, delivered", [("hooks.test", True), ("other.test", False)])
def test_https_connects_to_the_pinned_address_and_verifies_the_name(
    member, policy, names, monkeypatch, tmp_path, no_retry, cert_name, delivered
):
    """SNI and certificate verification use the URL's name although the connection goes to
    the checked address: a certificate for another name fails the delivery."""
    import certifi

    policy.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    server_tls, ca_file = _tls_pair(tmp_path, cert_name)
    monkeypatch.setattr(certifi, "where", lambda: ca_file)  # httpx's trust store, for this test
    names["hooks.test"] = [["127.0.0.1"], ["127.0.0.2"]]
    server = Receiver(tls=server_tls)
    try:
        delivery = _send(member, f"https://hooks.test:{server.port}/hook")
    finally:
        server.close()
    assert names.calls["hooks.test"] == 1
    if delivered:
        assert delivery.state == "delivered", delivery.error
        assert server.requests[0]["headers"]["Host"] == f"hooks.test:{server.port}"
    else:
        assert delivery.state == "pending" and "CERTIFICATE_VERIFY_FAILED" in delivery.error
        assert server.requests == []


# --- the policy alone ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address, kind",
    [
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),  # noqa: S104 - an address checked, not bound
        ("::", "unspecified"),
        ("239.1.1.1", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "reserved"),
        ("10.0.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.0.1", "private"),
        ("100.64.0.1", "private"),
        ("fc00::1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 wrapping 127.0.0.1
        ("::ffff:10.0.0.1", "private"),
    ],
)
def test_address_policy(address, kind):
    assert egress.address_problem(address) == kind


def test_allowed_networks_allow_only_private_and_loopback():
    allowed = egress.parse_networks(["10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "::/0"])
    assert egress.address_problem("10.2.3.4", allowed) is None
    assert egress.address_problem("127.0.0.1", allowed) is None
    assert egress.address_problem("192.168.1.1", allowed) == "private"
    assert egress.address_problem("169.254.169.254", allowed) == "link-local"
    assert egress.address_problem("::", allowed) == "unspecified"
    assert egress.address_problem("ff02::1", allowed) == "multicast"
    with pytest.raises(ValueError, match="'nope'"):
        egress.parse_networks(["nope"])

"""A minimal Docker Registry HTTP API v2 that serves synthetic images.

A real Docker engine can `docker pull 127.0.0.1:<port>/vllm/vllm-openai:<tag>` from it, so
the panel shows real pull progress (layers, bytes) without the internet. Every layer is a
gzipped tar holding one file of deterministic, incompressible bytes, so the bytes on the
wire are about the layer's size. Read-only: pushes are refused. Standard library only.

    with Registry([ImageSpec("vllm/vllm-openai", "v0.11.0")]) as registry:
        docker_client.images.pull(registry.reference(spec))

`python -m sparksim registry --port 5000 --image vllm/vllm-openai:v0.11.0` serves it from
the command line.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import logging
import platform
import random
import re
import signal
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

log = logging.getLogger("sparksim.registry")

MIB = 2**20
CHUNK = 64 * 1024
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_V1 = "application/vnd.docker.container.image.v1+json"
LAYER_TAR_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
CREATED = "2025-01-01T00:00:00Z"  # fixed, so the same spec always gives the same digests
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_NAME = re.compile(
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_ROUTE = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")
_TAGS = re.compile(r"^/v2/(?P<name>.+)/tags/list$")
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def docker_architecture(machine: str | None = None) -> str:
    """The GOARCH-style name Docker uses for this machine (`amd64`, `arm64`)."""
    machine = (machine or platform.machine()).lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        machine, machine
    )


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ImageSpec:
    """One synthetic image: `name:tag`, with one layer per entry of `layer_sizes` (bytes of
    the file inside the layer; the gzipped blob is a little larger)."""

    name: str
    tag: str
    layer_sizes: tuple[int, ...] = (4 * MIB, 8 * MIB)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"invalid repository name: {self.name!r}")
        if not _TAG.fullmatch(self.tag):
            raise ValueError(f"invalid tag: {self.tag!r}")
        if not self.layer_sizes or any(not isinstance(n, int) or n < 0 for n in self.layer_sizes):
            raise ValueError("layer_sizes must be one or more non-negative integers")
        object.__setattr__(self, "layer_sizes", tuple(self.layer_sizes))

    @classmethod
    def parse(cls, text: str, layer_sizes: tuple[int, ...] | None = None) -> ImageSpec:
        """`name[:tag]` (tag `latest` when absent)."""
        name, sep, tag = text.rpartition(":")
        if not sep or "/" in tag:
            name, tag = text, "latest"
        if layer_sizes is None:
            return cls(name, tag)
        return cls(name, tag, layer_sizes)

    def __str__(self) -> str:
        return f"{self.name}:{self.tag}"


@dataclass(frozen=True)
class Layer:
    digest: str  # of the gzipped blob, as in the manifest
    size: int  # of the gzipped blob
    diff_id: str  # of the uncompressed tar, as in the config's rootfs


@dataclass(frozen=True)
class BuiltImage:
    spec: ImageSpec
    manifest: bytes
    manifest_digest: str
    config: bytes
    config_digest: str
    layers: tuple[Layer, ...]
    blobs: dict[str, bytes] = field(repr=False, compare=False)

    @property
    def download_size(self) -> int:
        """Bytes of all layer blobs: what a pull downloads (the config aside)."""
        return sum(layer.size for layer in self.layers)


def _layer_payload(spec: ImageSpec, index: int, size: int) -> bytes:
    seed = hashlib.sha256(f"sparksim-registry\0{spec.name}\0{spec.tag}\0{index}".encode()).digest()
    return random.Random(seed).randbytes(size)  # noqa: S311 - test data, not secrets


def _layer_tar(index: int, payload: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("opt", "opt/sparksim"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        info = tarfile.TarInfo(f"opt/sparksim/layer-{index}.bin")
        info.size, info.mode, info.mtime = len(payload), 0o644, 0
        tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def build_image(spec: ImageSpec, architecture: str | None = None) -> BuiltImage:
    """Make the blobs, config and manifest of `spec` (deterministic for a given spec)."""
    blobs: dict[str, bytes] = {}
    layers = []
    for index, size in enumerate(spec.layer_sizes):
        tar = _layer_tar(index, _layer_payload(spec, index, size))
        # Level 0: the data is incompressible anyway, and storing is 20× faster than level 1.
        blob = gzip.compress(tar, compresslevel=0, mtime=0)
        digest = sha256_digest(blob)
        blobs[digest] = blob
        layers.append(Layer(digest, len(blob), sha256_digest(tar)))
    config = json.dumps(
        {
            "architecture": architecture or docker_architecture(),
            "os": "linux",
            "created": CREATED,
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
            "history": [
                {
                    "created": CREATED,
                    "created_by": f"sparksim registry: {spec} layer {i} "
                    f"({spec.layer_sizes[i]} bytes)",
                }
                for i in range(len(layers))
            ],
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()
    config_digest = sha256_digest(config)
    blobs[config_digest] = config
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_V2,
            "config": {"mediaType": CONFIG_V1, "size": len(config), "digest": config_digest},
            "layers": [
                {"mediaType": LAYER_TAR_GZIP, "size": layer.size, "digest": layer.digest}
                for layer in layers
            ],
        },
        indent=3,
    ).encode()
    return BuiltImage(
        spec, manifest, sha256_digest(manifest), config, config_digest, tuple(layers), blobs
    )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: Registry


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Docker fetches several blobs per connection
    server: _Server

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # -- plumbing --------------------------------------------------------------------------

    def _headers(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.server.registry._record(self.command, self.path, status)

    def _json(self, status: int, payload: object, extra: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        self._headers(status, headers | (extra or {}))
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, detail: object = None) -> None:
        error = {"code": code, "message": message}
        if detail is not None:
            error["detail"] = detail
        self._json(status, {"errors": [error]})

    # -- routes ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        registry = self.server.registry
        path = unquote(urlsplit(self.path).path)
        if path in ("/v2", "/v2/"):
            self._json(200, {})
            return
        if match := _TAGS.match(path):
            name = match["name"]
            tags = [s.tag for s in registry.images if s.name == name]
            if not tags:
                self._error(404, "NAME_UNKNOWN", "repository name not known to registry", name)
            else:
                self._json(200, {"name": name, "tags": tags})
            return
        match = _ROUTE.match(path)
        if match is None:
            self._error(404, "NOT_FOUND", "not found", path)  # not a v2 route
            return
        name, kind, ref = match["name"], match["kind"], match["ref"]
        if not any(spec.name == name for spec in registry.images):
            self._error(404, "NAME_UNKNOWN", "repository name not known to registry", name)
        elif kind == "manifests":
            self._manifest(name, ref)
        else:
            self._blob(name, ref)

    do_HEAD = do_GET

    def _refuse(self) -> None:
        self.close_connection = True  # the request's body is left unread
        self._error(405, "UNSUPPORTED", "this registry is read-only")

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def _manifest(self, name: str, ref: str) -> None:
        image = self.server.registry._find_manifest(name, ref)
        if image is None:
            self._error(404, "MANIFEST_UNKNOWN", "manifest unknown", {"Tag": ref})
            return
        self._headers(
            200,
            {
                "Content-Type": MANIFEST_V2,
                "Content-Length": str(len(image.manifest)),
                "Docker-Content-Digest": image.manifest_digest,
                "ETag": f'"{image.manifest_digest}"',
            },
        )
        if self.command != "HEAD":
            self.wfile.write(image.manifest)

    def _blob(self, name: str, digest: str) -> None:
        registry = self.server.registry
        blob = registry._find_blob(name, digest) if _DIGEST.fullmatch(digest) else None
        if blob is None:
            self._error(404, "BLOB_UNKNOWN", "blob unknown to registry", digest)
            return
        size = len(blob)
        headers = {
            "Content-Type": "application/octet-stream",
            "Docker-Content-Digest": digest,
            "Accept-Ranges": "bytes",
            "ETag": f'"{digest}"',
            "Cache-Control": "max-age=31536000",
        }
        start, end, status = 0, size, 200
        wanted = self.headers.get("Range")
        if wanted and self.command == "GET":
            parsed = _parse_range(wanted, size)
            if parsed is None:
                self._headers(416, {"Content-Range": f"bytes */{size}", "Content-Length": "0"})
                return
            start, end = parsed
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        headers["Content-Length"] = str(end - start)
        self._headers(status, headers)
        if self.command == "HEAD":
            return
        try:
            self._send_body(memoryview(blob)[start:end], start)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_body(self, body: memoryview, offset: int) -> None:
        """Write `body` (bytes [offset, offset + len) of a blob) in chunks, paced to the
        registry's rate, and cut the connection at byte `fail_blob_after` of the blob."""
        registry = self.server.registry
        rate, fail_at = registry.rate_bytes_per_s, registry.fail_blob_after
        began, sent = time.monotonic(), 0
        while sent < len(body):
            chunk = body[sent : sent + CHUNK]
            if fail_at is not None and offset + sent + len(chunk) > fail_at:
                self.wfile.write(chunk[: max(0, fail_at - offset - sent)])
                log.info("fault: closing the connection at byte %d of a blob", fail_at)
                self.close_connection = True
                return
            self.wfile.write(chunk)
            sent += len(chunk)
            if rate:
                delay = began + sent / rate - time.monotonic()
                if delay > 0 and registry._stopping.wait(delay):
                    self.close_connection = True  # stop() while throttled: give up
                    return


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """A single `bytes=a-b` / `bytes=a-` / `bytes=-n` range as [start, end); None when it
    cannot be satisfied."""
    match = _RANGE.match(header.strip())
    if match is None or (not match[1] and not match[2]):
        return None
    if not match[1]:  # suffix: the last n bytes
        n = int(match[2])
        return (max(size - n, 0), size) if n > 0 and size > 0 else None
    start = int(match[1])
    end = min(int(match[2]) + 1, size) if match[2] else size
    return (start, end) if start < end else None


class Registry:
    """A read-only v2 registry for `images`, served from a daemon thread.

    `rate_bytes_per_s` throttles every blob response (per connection) so a pull takes
    visible time; `fail_blob_after` cuts the connection once a response reaches that byte
    of a blob (blobs no larger are served whole), so pulls of bigger layers fail — also
    when Docker retries with a Range request.
    """

    def __init__(
        self,
        images: list[ImageSpec],
        host: str = "127.0.0.1",
        port: int = 0,
        rate_bytes_per_s: float | None = None,
        fail_blob_after: int | None = None,
    ) -> None:
        seen = set()
        for spec in images:
            if (spec.name, spec.tag) in seen:
                raise ValueError(f"image listed twice: {spec}")
            seen.add((spec.name, spec.tag))
        if rate_bytes_per_s is not None and rate_bytes_per_s <= 0:
            raise ValueError("rate_bytes_per_s must be positive")
        if fail_blob_after is not None and fail_blob_after < 0:
            raise ValueError("fail_blob_after must be non-negative")
        self.images = list(images)
        self.host = host
        self.port = port
        self.rate_bytes_per_s = rate_bytes_per_s
        self.fail_blob_after = fail_blob_after
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status), in order
        self._built: dict[ImageSpec, BuiltImage] = {}
        self._build_lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Registry:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server((self.host, self.port), _Handler)
        server.registry = self
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"sparksim-registry-{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.debug("registry listening on %s", self.address)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Registry:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- addresses -------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """`host:port` as Docker should be given it (loopback when listening everywhere)."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host  # noqa: S104
        return f"{host}:{self.port}"

    def reference(self, spec: ImageSpec) -> str:
        """`127.0.0.1:PORT/name:tag`, what `docker pull` takes."""
        return f"{self.address}/{spec.name}:{spec.tag}"

    # -- content ---------------------------------------------------------------------------

    def image(self, spec: ImageSpec) -> BuiltImage:
        """The built image (blobs are made on first use, then kept in memory)."""
        with self._build_lock:
            built = self._built.get(spec)
            if built is None:
                began = time.monotonic()
                built = self._built[spec] = build_image(spec)
                log.debug("built %s in %.2fs", spec, time.monotonic() - began)
            return built

    def warm(self) -> None:
        """Build every image now rather than on the first pull."""
        for spec in self.images:
            self.image(spec)

    def _find_manifest(self, name: str, ref: str) -> BuiltImage | None:
        specs = [s for s in self.images if s.name == name]
        if _DIGEST.fullmatch(ref):
            return next((b for b in map(self.image, specs) if b.manifest_digest == ref), None)
        spec = next((s for s in specs if s.tag == ref), None)
        return None if spec is None else self.image(spec)

    def _find_blob(self, name: str, digest: str) -> bytes | None:
        for spec in self.images:
            if spec.name == name and (blob := self.image(spec).blobs.get(digest)) is not None:
                return blob
        return None

    def _record(self, method: str, path: str, status: int) -> None:
        self.requests.append((method, path, status))  # list.append is atomic


# -- command line ----------------------------------------------------------------------------


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "registry",
        help="serve synthetic images over the Docker Registry v2 API",
        description="Serve synthetic images over the Docker Registry HTTP API v2, so "
        "`docker pull 127.0.0.1:PORT/NAME:TAG` works without the internet.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=5000, help="port (0: any free one)")
    parser.add_argument(
        "--image",
        action="append",
        default=None,
        metavar="NAME[:TAG]",
        help="an image to serve (repeatable; default vllm/vllm-openai:latest)",
    )
    parser.add_argument(
        "--layer-mb", type=float, default=64.0, help="size of each layer in MiB (default 64)"
    )
    parser.add_argument("--layers", type=int, default=3, help="layers per image (default 3)")
    parser.add_argument(
        "--rate-mbps",
        type=float,
        default=None,
        metavar="MIB_PER_S",
        help="throttle each blob download to this many MiB (not megabits) per second",
    )
    parser.add_argument(
        "--fail-blob-after",
        type=int,
        default=None,
        metavar="BYTES",
        help="fault: cut the connection at this byte of every larger blob",
    )
    parser.add_argument("--log-level", default="WARNING")
    return parser


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(levelname)s %(asctime)s %(name)s %(message)s",
    )
    if args.layers < 1 or args.layer_mb < 0:
        print("--layers must be at least 1 and --layer-mb non-negative", file=sys.stderr)
        return 2
    if args.rate_mbps is not None and args.rate_mbps <= 0:
        print("--rate-mbps must be positive", file=sys.stderr)
        return 2
    sizes = (round(args.layer_mb * MIB),) * args.layers
    try:
        specs = [ImageSpec.parse(text, sizes) for text in args.image or ["vllm/vllm-openai"]]
        registry = Registry(
            specs,
            host=args.host,
            port=args.port,
            rate_bytes_per_s=args.rate_mbps * MIB if args.rate_mbps else None,
            fail_blob_after=args.fail_blob_after,
        )
    except ValueError as exc:
        print(f"sparksim registry: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    registry.warm()
    try:
        registry.start()
    except OSError as exc:
        print(
            f"sparksim registry: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr
        )
        return 1
    names = ", ".join(map(str, specs))
    print(f"sparksim registry listening on {registry.address} ({names})", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        registry.stop()
    return 0

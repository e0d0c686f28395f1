"""sparksim's Docker registry: the v2 API over plain HTTP, then pulls by a real Docker engine."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
import uuid

import docker
import httpx
import pytest

from sparksim.registry import (
    CONFIG_V1,
    LAYER_TAR_GZIP,
    MANIFEST_V2,
    MIB,
    ImageSpec,
    Registry,
    docker_architecture,
)
from tests.conftest import ROOT, require_service, stop_process

NAME = "vllm/vllm-openai"
SPEC = ImageSpec(NAME, "v0.0.1-test", (1 * MIB, 2 * MIB))
OTHER = ImageSpec(NAME, "other", (300_000,))


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def registry():
    with Registry([SPEC, OTHER]) as reg:
        yield reg


@pytest.fixture
def http(registry):
    with httpx.Client(base_url=f"http://{registry.address}", timeout=30) as client:
        yield client


def manifest_of(http, tag=SPEC.tag) -> tuple[httpx.Response, dict]:
    response = http.get(f"/v2/{NAME}/manifests/{tag}", headers={"Accept": MANIFEST_V2})
    assert response.status_code == 200, response.text
    return response, response.json()


def test_version_check(http):
    response = http.get("/v2/")
    assert response.status_code == 200
    assert response.json() == {}
    assert response.headers["Docker-Distribution-API-Version"] == "registry/2.0"


def test_listens_on_loopback(registry):
    host, port = registry.address.split(":")
    assert host == "127.0.0.1"
    assert int(port) > 0
    assert registry.reference(SPEC) == f"127.0.0.1:{port}/{NAME}:v0.0.1-test"


def test_manifest_digest_is_sha256_of_its_bytes(http):
    response, manifest = manifest_of(http)
    assert response.headers["Content-Type"] == MANIFEST_V2
    assert response.headers["Docker-Content-Digest"] == sha256(response.content)
    assert manifest["schemaVersion"] == 2
    assert manifest["mediaType"] == MANIFEST_V2
    assert manifest["config"]["mediaType"] == CONFIG_V1
    assert [layer["mediaType"] for layer in manifest["layers"]] == [LAYER_TAR_GZIP] * 2

    head = http.head(f"/v2/{NAME}/manifests/{SPEC.tag}")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["Docker-Content-Digest"] == response.headers["Docker-Content-Digest"]
    assert int(head.headers["Content-Length"]) == len(response.content)

    by_digest = http.get(f"/v2/{NAME}/manifests/{response.headers['Docker-Content-Digest']}")
    assert by_digest.status_code == 200
    assert by_digest.content == response.content


def test_blobs_match_their_digests_and_sizes(http):
    _, manifest = manifest_of(http)
    for descriptor in [manifest["config"], *manifest["layers"]]:
        blob = http.get(f"/v2/{NAME}/blobs/{descriptor['digest']}")
        assert blob.status_code == 200
        assert sha256(blob.content) == descriptor["digest"]
        assert len(blob.content) == descriptor["size"]
        assert blob.headers["Docker-Content-Digest"] == descriptor["digest"]
        head = http.head(f"/v2/{NAME}/blobs/{descriptor['digest']}")
        assert head.status_code == 200
        assert int(head.headers["Content-Length"]) == descriptor["size"]
        assert head.content == b""


def test_config_describes_the_layers(http):
    _, manifest = manifest_of(http)
    config = http.get(f"/v2/{NAME}/blobs/{manifest['config']['digest']}").json()
    assert config["os"] == "linux"
    assert config["architecture"] == docker_architecture()
    assert config["architecture"] in ("amd64", "arm64")
    assert config["rootfs"]["type"] == "layers"
    assert len(config["history"]) == len(SPEC.layer_sizes)
    diff_ids = []
    for index, descriptor in enumerate(manifest["layers"]):
        tar_bytes = gzip.decompress(http.get(f"/v2/{NAME}/blobs/{descriptor['digest']}").content)
        diff_ids.append(sha256(tar_bytes))
        with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
            files = [member for member in tar.getmembers() if member.isfile()]
            assert [f.name for f in files] == [f"opt/sparksim/layer-{index}.bin"]
            assert files[0].size == SPEC.layer_sizes[index]
            payload = tar.extractfile(files[0]).read()
        # incompressible, so the bytes on the wire are about the layer's size
        assert len(gzip.compress(payload[:MIB], compresslevel=6)) > 0.99 * min(len(payload), MIB)
        assert descriptor["size"] >= SPEC.layer_sizes[index]
    assert config["rootfs"]["diff_ids"] == diff_ids


def test_images_are_deterministic_and_distinct(registry):
    again = Registry([SPEC])
    assert again.image(SPEC).manifest_digest == registry.image(SPEC).manifest_digest
    assert registry.image(SPEC).layers[0].digest != registry.image(OTHER).layers[0].digest


def test_unknown_things_answer_404_with_registry_error_codes(http):
    response = http.get(f"/v2/{NAME}/manifests/no-such-tag")
    assert response.status_code == 404
    assert response.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"
    assert response.json()["errors"][0]["message"] == "manifest unknown"
    assert http.head(f"/v2/{NAME}/manifests/no-such-tag").status_code == 404

    response = http.get(f"/v2/{NAME}/manifests/sha256:{'0' * 64}")
    assert response.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"

    response = http.get(f"/v2/{NAME}/blobs/sha256:{'0' * 64}")
    assert response.status_code == 404
    assert response.json()["errors"][0]["code"] == "BLOB_UNKNOWN"

    response = http.get("/v2/nobody/nothing/manifests/latest")
    assert response.status_code == 404
    assert response.json()["errors"][0]["code"] == "NAME_UNKNOWN"

    assert http.put(f"/v2/{NAME}/manifests/x", content=b"{}").status_code == 405


def test_tags_list(http):
    response = http.get(f"/v2/{NAME}/tags/list")
    assert response.json() == {"name": NAME, "tags": [SPEC.tag, OTHER.tag]}


def test_range_requests(http, registry):
    layer = registry.image(SPEC).layers[0]
    whole = http.get(f"/v2/{NAME}/blobs/{layer.digest}").content
    part = http.get(f"/v2/{NAME}/blobs/{layer.digest}", headers={"Range": "bytes=100-199"})
    assert part.status_code == 206
    assert part.content == whole[100:200]
    assert part.headers["Content-Range"] == f"bytes 100-199/{layer.size}"
    tail = http.get(f"/v2/{NAME}/blobs/{layer.digest}", headers={"Range": "bytes=1000-"})
    assert tail.content == whole[1000:]
    beyond = http.get(f"/v2/{NAME}/blobs/{layer.digest}", headers={"Range": f"bytes={layer.size}-"})
    assert beyond.status_code == 416


def test_throttling_paces_blob_downloads():
    spec = ImageSpec(NAME, "slow", (MIB,))
    with Registry([spec], rate_bytes_per_s=4 * MIB) as reg:
        layer = reg.image(spec).layers[0]
        began = time.monotonic()
        blob = httpx.get(f"http://{reg.address}/v2/{NAME}/blobs/{layer.digest}", timeout=30)
        elapsed = time.monotonic() - began
    assert sha256(blob.content) == layer.digest
    assert elapsed >= 0.2


def test_fault_cuts_the_connection_mid_blob():
    spec = ImageSpec(NAME, "broken", (MIB,))
    with Registry([spec], fail_blob_after=200_000) as reg:
        built = reg.image(spec)
        base = f"http://{reg.address}/v2/{NAME}/blobs/"
        # the small config blob is whole; the layer stops at byte 200,000, also when resumed
        assert httpx.get(base + built.config_digest).content == built.config
        received = bytearray()
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream("GET", base + built.layers[0].digest) as response,
        ):
            for chunk in response.iter_bytes():
                received += chunk
        assert len(received) == 200_000
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.get(base + built.layers[0].digest, headers={"Range": "bytes=200000-"})


def test_stop_interrupts_a_throttled_download():
    spec = ImageSpec(NAME, "stopped", (MIB,))
    reg = Registry([spec], rate_bytes_per_s=64 * 1024).start()
    digest = reg.image(spec).layers[0].digest
    with httpx.stream("GET", f"http://{reg.address}/v2/{NAME}/blobs/{digest}") as response:
        chunks = response.iter_bytes()
        received = len(next(chunks))
        began = time.monotonic()
        reg.stop()
        assert time.monotonic() - began < 10  # the 1 MiB at 64 KiB/s would take 16 s
        with pytest.raises(httpx.RemoteProtocolError):
            for chunk in chunks:
                received += len(chunk)
    assert received < MIB


def test_command_line_serves_and_exits_0_on_sigterm():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sparksim",
            "registry",
            "--port",
            "0",
            "--image",
            "vllm/vllm-openai:v0.11.0",
            "--image",
            "acme/tool",
            "--layer-mb",
            "0.5",
            "--layers",
            "2",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("sparksim registry listening on 127.0.0.1:"), line
        assert "(vllm/vllm-openai:v0.11.0, acme/tool:latest)" in line
        address = line.split()[4]
        manifest = httpx.get(f"http://{address}/v2/acme/tool/manifests/latest").json()
        assert [layer["size"] > MIB // 2 for layer in manifest["layers"]] == [True, True]
    finally:
        assert stop_process(proc) == 0


# -- a real Docker engine --------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_client():
    host = os.environ.get("DOCKER_HOST")
    client = None
    if host:
        try:
            client = docker.DockerClient(base_url=host, timeout=60)
            client.ping()
        except docker.errors.DockerException:
            client = None
    require_service(client is not None, "a Docker engine")
    yield client
    client.close()


@pytest.mark.services
def test_docker_pulls_with_progress(docker_client):
    # a fresh tag each run: fresh layers, so Docker downloads rather than reusing them
    spec = ImageSpec(NAME, f"test-{uuid.uuid4().hex[:12]}", (2 * MIB, 3 * MIB))
    with Registry([spec], rate_bytes_per_s=16 * MIB) as reg:
        built = reg.image(spec)
        reference = reg.reference(spec)
        try:
            events = list(
                docker_client.api.pull(
                    f"{reg.address}/{spec.name}", tag=spec.tag, stream=True, decode=True
                )
            )
            assert not [e for e in events if "error" in e], events
            downloading: dict[str, list[dict]] = {}
            for event in events:
                if event.get("status") == "Downloading":
                    downloading.setdefault(event["id"], []).append(event["progressDetail"])
            short_ids = {layer.digest.removeprefix("sha256:")[:12]: layer for layer in built.layers}
            assert set(downloading) == set(short_ids), events
            for short_id, details in downloading.items():
                assert all(d["total"] == short_ids[short_id].size for d in details)
                assert all(0 < d["current"] <= d["total"] for d in details)
            statuses = {e.get("status") for e in events}
            assert "Pull complete" in statuses
            assert f"Digest: {built.manifest_digest}" in statuses
            tags = [tag for image in docker_client.images.list() for tag in image.tags]
            assert reference in tags
            image = docker_client.images.get(reference)
            assert image.attrs["Architecture"] == docker_architecture()
            assert image.attrs["RootFS"]["Layers"] == [layer.diff_id for layer in built.layers]
        finally:
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(reference, force=True)
        assert reference not in [t for image in docker_client.images.list() for t in image.tags]
        assert ("HEAD", f"/v2/{NAME}/manifests/{spec.tag}", 200) in reg.requests


@pytest.mark.services
def test_docker_pull_of_unknown_tag_says_manifest_unknown(docker_client):
    with Registry([SPEC]) as reg:
        with pytest.raises(docker.errors.APIError, match="manifest unknown") as caught:
            docker_client.api.pull(f"{reg.address}/{NAME}", tag="no-such-tag")
        assert isinstance(caught.value, docker.errors.NotFound)

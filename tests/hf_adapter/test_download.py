"""hf_adapter against a local hub (hubsim) with the real huggingface_hub client: a plan
counts what a cache lacks, a download fills the cache in its own layout with progress, a
killed download resumes with a Range instead of starting over, a stop keeps what was
fetched and counts nothing half-written, gated models fail with advice, revisions are
pinned, and the inventory lists and deletes exactly what is on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from huggingface_hub import scan_cache_dir, snapshot_download

from hf_adapter import cache, inventory
from hf_adapter.errors import HubError
from hf_adapter.plan import plan_download
from hf_adapter.transfer import DownloadStopped, download
from hubsim import store
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
REPO = "org/tiny"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
BIG = bytes(range(256)) * (96 * 1024)  # 24 MiB, not zeros: a resume must be byte-exact
FILES = {
    SHARDS[0]: BIG,
    SHARDS[1]: b"s" * 4096,
    "model.safetensors.index.json": json.dumps(
        {"metadata": {}, "weight_map": {"a": SHARDS[0], "b": SHARDS[1]}}
    ).encode(),
    "pytorch_model.bin": b"b" * 50_000,  # the same weights again: never fetched
    "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
    "tokenizer.json": b"{}",
    "original/consolidated.00.pth": b"o" * 10_000,  # another runtime's copy: never fetched
}
WANTED = {
    p: c for p, c in FILES.items() if p not in ("pytorch_model.bin", "original/consolidated.00.pth")
}


def plan(hub, hub_cache, revision="main", token=None):
    return plan_download(REPO, revision, hub_cache=hub_cache, endpoint=hub.url, token=token)


def test_a_download_fills_the_cache_in_its_own_layout_with_progress(hub, tmp_path):
    commit = store.publish(hub.root, REPO, FILES)
    hub_cache = tmp_path / "hf-home" / "hub"
    first = plan(hub, hub_cache)
    assert first.commit == commit and first.revision == "main"
    assert {f.entry.path for f in first.files} == set(WANTED)
    assert first.total_bytes == sum(map(len, WANTED.values()))
    # The index was fetched to read its weight map; everything else is missing.
    assert first.missing_bytes == first.total_bytes - len(WANTED["model.safetensors.index.json"])
    assert first.selection.skipped_bytes == 60_000 and first.free_bytes() > first.missing_bytes

    hub.faults(rate=8 * 1024 * 1024)  # 8 MiB/s: a few seconds, several reports
    reports = []
    final = download(first, token=None, on_progress=reports.append, report_every_s=0.2)
    assert final.finished and final.done_bytes == final.total_bytes == first.total_bytes
    done = [r["done_bytes"] for r in reports]
    assert done == sorted(done) and len(reports) >= 4, done
    assert reports[-1]["finished"] and reports[-1]["eta_s"] == 0
    # huggingface_hub's http_get hands over 10 MiB at a time (DOWNLOAD_CHUNK_SIZE).
    middle = [r for r in reports if r["done_bytes"] < r["total_bytes"] and r["rate_bps"]]
    assert middle and all(r["eta_s"] > 0 for r in middle)
    assert reports[-1]["files"][SHARDS[0]] == [len(BIG), len(BIG)]

    snapshot = cache.snapshot_dir(hub_cache, REPO, commit)
    for path, content in WANTED.items():
        assert (snapshot / path).read_bytes() == content, path
        assert (snapshot / path).is_symlink()
    assert not (snapshot / "pytorch_model.bin").exists()
    assert (cache.repo_dir(hub_cache, REPO) / "refs" / "main").read_text() == commit
    # The client finds it offline, as vLLM's containers will (HF_HUB_OFFLINE=1).
    assert snapshot_download(REPO, cache_dir=hub_cache, local_files_only=True) == str(snapshot)
    (scanned,) = scan_cache_dir(hub_cache).repos
    assert scanned.size_on_disk == first.total_bytes

    # Nothing left to fetch: a second download asks the hub for no file.
    again = plan(hub, hub_cache)
    assert again.complete and again.missing_bytes == 0
    hub.clear()
    download(again, token=None)
    assert not [r for r in hub.requests() if "/resolve/" in r["path"] or "/cdn/" in r["path"]]


DOWNLOAD_SCRIPT = """
import sys
from pathlib import Path
from hf_adapter.plan import plan_download
from hf_adapter.transfer import download
plan = plan_download({repo!r}, "main", hub_cache=Path({cache!r}), endpoint={url!r}, token=None)
download(plan, token=None)
"""


def test_a_worker_killed_mid_download_is_resumed_where_it_stopped(hub, tmp_path):
    commit = store.publish(hub.root, REPO, FILES)
    hub_cache = tmp_path / "hub-cache"
    hub.faults(rate=4 * 1024 * 1024)  # 24 MiB in ~6 s
    script = DOWNLOAD_SCRIPT.format(repo=REPO, cache=str(hub_cache), url=hub.url)
    worker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT)
    planned = plan(hub, hub_cache)
    big = next(f.entry for f in planned.files if f.entry.path == SHARDS[0])
    partial = cache.incomplete_path(hub_cache, big)
    try:
        wait_for(lambda: partial.exists() and partial.stat().st_size > 8 * 1024 * 1024, 60,
                 "8 MiB of the big shard", proc=worker)  # fmt: skip
        os.kill(worker.pid, signal.SIGKILL)  # as an OOM kill or a reboot would
    finally:
        worker.wait(timeout=30)
    kept = partial.stat().st_size
    assert 0 < kept < len(BIG) and not cache.is_complete(hub_cache, big)

    hub.faults()  # full speed for the resume
    hub.clear()
    resumed = plan(hub, hub_cache)
    assert next(f.have for f in resumed.files if f.entry.path == SHARDS[0]) == kept
    download(resumed, token=None)
    assert cache.snapshot_path(hub_cache, big).read_bytes() == BIG
    gets = [r for r in hub.requests() if r["path"].startswith("/cdn/") and r["method"] == "GET"]
    assert [(r["status"], r["range"]) for r in gets if r["sent"] > 4096] == [
        (206, f"bytes={kept}-")
    ]
    assert not partial.exists() and commit in str(cache.snapshot_path(hub_cache, big))


def test_a_stop_keeps_what_was_fetched_and_counts_nothing_half_written(hub, tmp_path):
    store.publish(hub.root, REPO, FILES)
    hub_cache = tmp_path / "hub-cache"
    hub.faults(rate=8 * 1024 * 1024)
    planned = plan(hub, hub_cache)
    big = next(f.entry for f in planned.files if f.entry.path == SHARDS[0])
    partial = cache.incomplete_path(hub_cache, big)

    def stop_after_4_mib() -> bool:
        return partial.exists() and partial.stat().st_size >= 4 * 1024 * 1024

    with pytest.raises(DownloadStopped):
        download(planned, token=None, should_stop=stop_after_4_mib, workers=1)
    assert (
        not cache.is_complete(hub_cache, big) and not cache.snapshot_path(hub_cache, big).exists()
    )
    kept = partial.stat().st_size
    assert 4 * 1024 * 1024 <= kept < len(BIG)
    # The inventory counts the partial apart; no revision claims the big shard.
    (model,) = inventory.scan(hub_cache).models
    assert model.partial_bytes == kept
    assert all(r.size_on_disk < len(BIG) for r in model.revisions)
    resumed = plan(hub, hub_cache)
    assert next(f.have for f in resumed.files if f.entry.path == SHARDS[0]) == kept
    assert resumed.missing_bytes <= planned.missing_bytes - kept


def test_gated_models_fail_with_the_advice_to_accept_the_licence(hub, tmp_path):
    store.publish(hub.root, REPO, FILES, gated="manual", tokens=["hf_granted"])
    hub_cache = tmp_path / "hub-cache"
    with pytest.raises(HubError) as anonymous:
        plan(hub, hub_cache)  # the index is a gated file too
    assert anonymous.value.kind == "gated_no_token"
    assert "HF_TOKEN" in anonymous.value.advice
    with pytest.raises(HubError) as refused:
        plan(hub, hub_cache, token="hf_someone_else")
    assert refused.value.kind == "gated" and "Accept the licence" in refused.value.advice
    assert f"{hub.url}/{REPO}" in refused.value.advice
    assert "hf_someone_else" not in str(refused.value)  # a token is never in a message

    granted = plan(hub, hub_cache, token="hf_granted")
    store.set_access(hub.root, REPO, tokens=[])  # access revoked between plan and download
    with pytest.raises(HubError) as revoked:
        download(granted, token="hf_granted")
    assert revoked.value.kind == "gated"


def test_a_revision_is_pinned_to_its_commit(hub, tmp_path):
    first = store.publish(hub.root, REPO, FILES)
    second = store.publish(hub.root, REPO, {**FILES, "config.json": b'{"changed": 1}'})
    hub_cache = tmp_path / "hub-cache"
    pinned = plan(hub, hub_cache, revision=first)
    assert pinned.commit == first
    download(pinned, token=None)
    assert (cache.snapshot_dir(hub_cache, REPO, first) / "config.json").read_bytes() == FILES[
        "config.json"
    ]
    assert not (cache.repo_dir(hub_cache, REPO) / "refs" / "main").exists()  # a hash needs none

    latest = plan(hub, hub_cache)
    assert latest.commit == second
    # Only the changed file is missing: the shards' blobs are shared between the commits.
    assert latest.missing_bytes == len(b'{"changed": 1}')
    download(latest, token=None)
    assert (cache.repo_dir(hub_cache, REPO) / "refs" / "main").read_text() == second
    assert (cache.snapshot_dir(hub_cache, REPO, second) / SHARDS[0]).read_bytes() == BIG

    with pytest.raises(HubError) as unknown:
        plan(hub, hub_cache, revision="v9")
    assert unknown.value.kind == "revision_not_found"
    for bad in ("../../etc", "-rf", "a/../b"):
        with pytest.raises(HubError) as refused:
            plan(hub, hub_cache, revision=bad)
        assert refused.value.kind == "bad_revision"
    with pytest.raises(HubError) as no_repo:
        plan_download("../x", "main", hub_cache=hub_cache, endpoint=hub.url, token=None)
    assert no_repo.value.kind == "bad_repo_id"

    # The inventory: one model, two revisions, shared blobs counted once; delete one.
    (model,) = inventory.scan(hub_cache).models
    assert model.repo_id == REPO and {r.commit for r in model.revisions} == {first, second}
    assert model.size_on_disk == latest.total_bytes + len(FILES["config.json"])
    freed = inventory.delete(hub_cache, REPO, [first])
    assert freed == len(FILES["config.json"])  # the shards stay: the second commit uses them
    (model,) = inventory.scan(hub_cache).models
    assert [r.commit for r in model.revisions] == [second]
    with pytest.raises(ValueError, match="no cached revision"):
        inventory.delete(hub_cache, REPO, [first])
    assert inventory.delete(hub_cache, REPO) == latest.total_bytes
    assert inventory.scan(hub_cache).models == ()
    assert not cache.repo_dir(hub_cache, REPO).exists()


NAMES_SCRIPT = textwrap.dedent(
    """
    import json, os, socket, sys
    from pathlib import Path
    os.environ.pop("HF_ENDPOINT", None)  # huggingface_hub's default: huggingface.co
    looked_up = []
    real = socket.getaddrinfo
    def getaddrinfo(host, *args, **kwargs):
        looked_up.append(str(host))
        return real(host, *args, **kwargs)
    socket.getaddrinfo = getaddrinfo
    from hf_adapter.plan import plan_download
    from hf_adapter.transfer import download
    from huggingface_hub.utils import ANSI
    planned = plan_download("org/tiny", "main", hub_cache=Path(sys.argv[2]),
                            endpoint=sys.argv[1], token=None)
    download(planned, token=None)
    ANSI.bold("a terminal message")  # what made huggingface_hub ask its default hub
    print(json.dumps(sorted(set(looked_up))))
    """
)


def test_a_download_looks_up_no_name_but_the_configured_hubs(hub, tmp_path):
    """huggingface_hub 2.x asks huggingface.co for an "agent harnesses" registry when it
    first formats a terminal message; a Spark on a LAN with a mirror must not (the empty
    registry set in hf_adapter/__init__.py)."""
    store.publish(hub.root, REPO, {"config.json": b"{}", "model.safetensors": b"w" * 4096})
    env = {k: v for k, v in os.environ.items() if k != "HF_ENDPOINT"}
    env["HF_HOME"] = str(tmp_path / "home")  # no registry cached from an earlier run
    out = subprocess.run(
        [sys.executable, "-c", NAMES_SCRIPT, hub.url, str(tmp_path / "hub-cache")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    names = json.loads(out.stdout.strip().splitlines()[-1])
    assert names and set(names) <= {"127.0.0.1", "127.0.0.2"}, names

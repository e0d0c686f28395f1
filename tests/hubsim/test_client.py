"""hubsim speaks the Hub's protocol as the real `huggingface_hub` client (2.4.0, the version
vLLM's images ship) uses it: model info, the file tree with sizes, revisions, LFS files
through the CDN redirect, ranged resumption after a cut connection, gated and private
repositories and the client's own error classes, and the cache its downloads leave."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, constants, hf_hub_download, scan_cache_dir, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder

from hubsim import store

REPO = "sparkpanel/hub-tiny"
WEIGHTS = bytes(range(256)) * (12 * 1024)  # 3 MiB, not all zeros: a resume must be exact
FILES = {
    "config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(),
    "tokenizer.json": b'{"version": "1.0"}',
    "model.safetensors": WEIGHTS,
    "original/consolidated.pth": b"x" * 1000,
}


@pytest.fixture(autouse=True)
def _online():
    assert not constants.HF_HUB_OFFLINE, "HF_HUB_OFFLINE is set in the test environment"


def test_a_snapshot_downloads_into_the_cache_exactly_as_published(hub, tmp_path):
    commit = store.publish(hub.root, REPO, FILES)
    cache = tmp_path / "cache"
    folder = snapshot_download(REPO, endpoint=hub.url, cache_dir=cache)
    assert folder.endswith(f"snapshots/{commit}")
    for path, content in FILES.items():
        assert (tmp_path / folder / path).read_bytes() == content, path
    # LFS content went through the CDN redirect, the rest straight from /resolve.
    asked = {(r["method"], r["path"]): r["status"] for r in hub.requests()}
    assert asked["HEAD", f"/{REPO}/resolve/{commit}/model.safetensors"] == 302
    assert asked["GET", f"/cdn/{hashlib.sha256(WEIGHTS).hexdigest()}"] == 200
    assert ("GET", f"/{REPO}/resolve/{commit}/model.safetensors") not in asked
    assert asked["GET", f"/{REPO}/resolve/{commit}/config.json"] == 200

    # The client's own cache scan sees one repository, one revision, every byte.
    info = scan_cache_dir(cache)
    (repo,) = info.repos
    assert repo.repo_id == REPO and repo.size_on_disk == sum(map(len, FILES.values()))
    assert [r.commit_hash for r in repo.revisions] == [commit]
    assert {f.file_name for f in next(iter(repo.revisions)).files} == {
        p.rsplit("/", 1)[-1] for p in FILES
    }


def test_model_info_and_the_tree_give_sizes_without_a_download(hub):
    big = 64 * 1024 * 1024
    commit = store.publish(hub.root, REPO, {**FILES, "model-00002-of-00002.safetensors": big})
    api = HfApi(endpoint=hub.url)
    info = api.model_info(REPO, files_metadata=True)
    assert info.sha == commit
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes["model-00002-of-00002.safetensors"] == big
    assert sizes["config.json"] == len(FILES["config.json"])
    lfs = {s.rfilename: s.lfs for s in info.siblings}
    assert lfs["model.safetensors"].sha256 == hashlib.sha256(WEIGHTS).hexdigest()
    assert lfs["config.json"] is None

    tree = list(api.list_repo_tree(REPO, recursive=True))
    files = {e.path: e.size for e in tree if isinstance(e, RepoFile)}
    assert files == {
        **{p: len(c) for p, c in FILES.items()},
        "model-00002-of-00002.safetensors": big,
    }
    assert "original" in {e.path for e in tree if isinstance(e, RepoFolder)}
    top = {e.path for e in api.list_repo_tree(REPO)}
    assert "original/consolidated.pth" not in top and "original" in top
    # Nothing was downloaded to answer this.
    assert not [
        r for r in hub.requests() if "/resolve/" in r["path"] or r["path"].startswith("/cdn/")
    ]

    # A dry run (how much a download would fetch) — what disk admission needs.
    plan = snapshot_download(REPO, endpoint=hub.url, dry_run=True, allow_patterns=["*.safetensors"])
    assert {p.filename: (p.file_size, p.will_download) for p in plan} == {
        "model.safetensors": (len(WEIGHTS), True),
        "model-00002-of-00002.safetensors": (big, True),
    }


def test_revisions_are_pinned_and_unknown_ones_fail_in_the_clients_words(hub, tmp_path):
    first = store.publish(hub.root, REPO, FILES)
    second = store.publish(hub.root, REPO, {**FILES, "config.json": b'{"changed": true}'})
    assert first != second
    cache = tmp_path / "cache"
    old = hf_hub_download(REPO, "config.json", revision=first, endpoint=hub.url, cache_dir=cache)
    new = hf_hub_download(REPO, "config.json", endpoint=hub.url, cache_dir=cache)
    assert Path(old).read_bytes() == FILES["config.json"]
    assert Path(new).read_bytes() == b'{"changed": true}'
    assert f"snapshots/{second}/" in new and f"snapshots/{first}/" in old
    assert HfApi(endpoint=hub.url).model_info(REPO, revision=first).sha == first

    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "config.json", revision="no-such-branch", endpoint=hub.url,
                        cache_dir=cache)  # fmt: skip
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "missing.json", endpoint=hub.url, cache_dir=cache)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("sparkpanel/none", "config.json", endpoint=hub.url, cache_dir=cache)


def test_a_cut_connection_is_resumed_with_a_range_request(hub, tmp_path):
    # The client writes what it received in chunks of DOWNLOAD_CHUNK_SIZE (10 MiB) and
    # resumes from the last whole chunk: a cut at 12 MiB resumes at 10 MiB.
    chunk = constants.DOWNLOAD_CHUNK_SIZE
    weights = bytes(range(256)) * (96 * 1024)  # 24 MiB
    commit = store.publish(hub.root, REPO, {**FILES, "model.safetensors": weights})
    hub.faults(drop_after=chunk + 2 * 1024 * 1024, drops=1)
    path = hf_hub_download(REPO, "model.safetensors", revision=commit, endpoint=hub.url,
                           cache_dir=tmp_path / "cache")  # fmt: skip
    assert Path(path).read_bytes() == weights
    cdn = [r for r in hub.requests() if r["path"].startswith("/cdn/") and r["method"] == "GET"]
    assert [(r["status"], r["range"], r.get("dropped", False)) for r in cdn] == [
        (200, None, True),
        (206, f"bytes={chunk}-", False),
    ]
    assert cdn[1]["sent"] == len(weights) - chunk

    # Ranges as the client and vLLM's loaders send them; a range past the end is 416.
    url = f"{hub.url}/{REPO}/resolve/{commit}/config.json"
    part = httpx.get(url, headers={"Range": "bytes=2-5"})
    assert part.status_code == 206 and part.content == FILES["config.json"][2:6]
    assert part.headers["content-range"] == f"bytes 2-5/{len(FILES['config.json'])}"
    assert httpx.get(url, headers={"Range": "bytes=9999-"}).status_code == 416


def test_gated_and_private_repositories_answer_as_the_hub_does(hub, tmp_path):
    store.publish(hub.root, "org/gated", FILES, gated="manual", tokens=["hf_granted"])
    store.publish(hub.root, "org/private", FILES, private=True, tokens=["hf_owner"])
    cache = tmp_path / "cache"

    def get(repo, token):
        return hf_hub_download(repo, "config.json", endpoint=hub.url, cache_dir=cache,
                               token=token)  # fmt: skip

    with pytest.raises(GatedRepoError) as anonymous:
        get("org/gated", False)
    assert anonymous.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as refused:
        get("org/gated", "hf_other")
    assert refused.value.response.status_code == 403
    assert "ask for access" in refused.value.response.headers["x-error-message"]
    # The licence page's metadata is public; the files are not.
    assert HfApi(endpoint=hub.url, token=False).model_info("org/gated").gated == "manual"
    assert Path(get("org/gated", "hf_granted")).read_bytes() == FILES["config.json"]

    with pytest.raises(RepositoryNotFoundError):
        get("org/private", "hf_other")
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.url, token="hf_other").model_info("org/private")
    assert Path(get("org/private", "hf_owner")).read_bytes() == FILES["config.json"]

    # Access changes without a commit: a revoked token is refused at once.
    store.set_access(hub.root, "org/gated", tokens=[])
    with pytest.raises(GatedRepoError):
        hf_hub_download("org/gated", "tokenizer.json", endpoint=hub.url, cache_dir=cache,
                        token="hf_granted")  # fmt: skip


def test_the_control_endpoints_refuse_what_they_cannot_use(hub):
    assert httpx.post(f"{hub.url}/hubsim/faults", content=b"{nope").status_code == 400
    assert httpx.post(f"{hub.url}/hubsim/faults", json={"rate": -1}).status_code == 400
    assert httpx.post(f"{hub.url}/hubsim/faults", content=b"x" * 10_000).status_code == 413
    assert httpx.get(f"{hub.url}/nothing/here").status_code == 404
    assert hub.faults(rate=1e6) == {"rate": 1e6, "drop_after": None, "drops": 0}
    with pytest.raises(store.StoreError):
        store.publish(hub.root, "../escape", FILES)
    with pytest.raises(store.StoreError):
        store.publish(hub.root, REPO, {"../x": b""})

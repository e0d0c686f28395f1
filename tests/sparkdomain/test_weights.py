"""The files a download fetches are the ones vLLM loads: `sparkdomain.weights.select` on a
repository's listing, checked against what real vLLM 0.33's own loader downloads from the
same repositories on a local hub (hubsim), for every layout the rules distinguish."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hubsim import store
from sparkdomain.weights import MAX_FILES, RepoFile, WeightsError, is_weight_file, select
from tests.conftest import require_service
from tests.hubsim.fixtures import serve_hub
from tests.vllm_adapter.real_parser import venv_python

ROOT = Path(__file__).resolve().parents[2]
INDEX = "model.safetensors.index.json"


def index(*shards: str) -> bytes:
    return json.dumps(
        {"metadata": {}, "weight_map": {f"layer.{i}": s for i, s in enumerate(shards)}}
    ).encode()


SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
LAYOUTS = {
    # Sharded safetensors with their index, the same weights as .bin with theirs, and an
    # original/ folder for another runtime: only the indexed shards.
    "org/sharded": {
        SHARDS[0]: b"a" * 300, SHARDS[1]: b"b" * 200, INDEX: index(*SHARDS),
        "pytorch_model-00001-of-00002.bin": b"c" * 300,
        "pytorch_model-00002-of-00002.bin": b"d" * 200,
        "pytorch_model.bin.index.json": b"{}",
        "original/consolidated.00.pth": b"e" * 500, "original/params.json": b"{}",
        "config.json": b"{}", "generation_config.json": b"{}", "tokenizer.json": b"{}",
        "tokenizer_config.json": b"{}", "chat_template.jinja": b"{{ messages }}",
    },
    # No index: every *.safetensors in the repository, folders included (vLLM's pattern).
    "org/unindexed": {
        "model.safetensors": b"a" * 100, "pytorch_model.bin": b"b" * 100,
        "extra/model.safetensors": b"c" * 100, "extra/notes.md": b"#", "config.json": b"{}",
    },
    # Only PyTorch files.
    "org/bin-only": {"pytorch_model.bin": b"a" * 100, "config.json": b"{}", "vocab.txt": b"a"},
    # Mistral's own format beside an HF copy: consolidated only.
    "org/mistral": {
        "consolidated.safetensors": b"a" * 100, "params.json": b"{}", "tekken.json": b"{}",
        SHARDS[0]: b"b" * 100, INDEX: index(SHARDS[0]), "config.json": b"{}",
    },
    # .pt weights (some quantized models).
    "org/pt-only": {"model.pt": b"a" * 100, "config.json": b"{}"},
}  # fmt: skip


def listing(files: dict[str, bytes]) -> list[RepoFile]:
    return [RepoFile(path, len(content)) for path, content in files.items()]


def weight_map(files: dict[str, bytes]) -> dict | None:
    return json.loads(files[INDEX])["weight_map"] if INDEX in files else None


def test_sharded_weights_with_an_index_skip_the_bin_copy_and_the_original_folder():
    files = LAYOUTS["org/sharded"]
    chosen = select(listing(files), weight_map(files))
    assert chosen.format == "safetensors-index"
    assert [f.path for f in chosen.weights] == list(SHARDS)
    assert {f.path for f in chosen.support} == {
        INDEX, "pytorch_model.bin.index.json", "config.json", "generation_config.json",
        "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
    }  # fmt: skip
    assert chosen.bytes == sum(len(files[f.path]) for f in chosen.files)
    skipped = {f.path: why for f, why in chosen.skipped}
    assert set(skipped) == {"pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
                            "original/consolidated.00.pth", "original/params.json"}  # fmt: skip
    assert "another format" in skipped["original/consolidated.00.pth"]
    assert "folder" in skipped["original/params.json"]
    assert chosen.skipped_bytes == 1000 + 2
    assert chosen.patterns == sorted(f.path for f in chosen.weights + chosen.support)


def test_what_cannot_be_chosen_is_refused_with_the_reason():
    with pytest.raises(WeightsError, match="no weights vLLM can load"):
        select(listing({"config.json": b"{}", "README.md": b"#"}))
    with pytest.raises(WeightsError, match="weight_map is needed"):
        select(listing(LAYOUTS["org/sharded"]))
    with pytest.raises(WeightsError, match="does not have: model-00009"):
        select(listing({INDEX: b""}), {"x": "model-00009-of-00009.safetensors"})
    with pytest.raises(WeightsError, match="more than"):
        select([RepoFile(f"f{i}.json", 1) for i in range(MAX_FILES + 1)])


@pytest.mark.real_vllm
def test_the_choice_is_what_real_vllms_loader_downloads(tmp_path):
    python = venv_python("0.33.0")
    require_service(python.exists(), f"vLLM 0.33.0 in {python.parent.parent} (tools/vllm_env.sh)")
    root = tmp_path / "hub"
    for repo_id, files in LAYOUTS.items():
        store.publish(root, repo_id, files)
    with serve_hub(root, tmp_path) as (hub_url, _proc):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("DJANGO", "HF_"))}  # fmt: skip
        env |= {"HF_ENDPOINT": hub_url, "HF_HOME": str(tmp_path / "hf-home"),
                "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}  # fmt: skip
        result = subprocess.run(
            [str(python), str(ROOT / "tests" / "sparkdomain" / "vllm_downloads.py")],
            input=json.dumps({"repos": list(LAYOUTS), "cache": str(tmp_path / "cache")}),
            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    answers = json.loads(result.stdout.strip().splitlines()[-1])
    for repo_id, files in LAYOUTS.items():
        fetched = answers[repo_id]
        assert isinstance(fetched, list), (repo_id, fetched)
        chosen = select(listing(files), weight_map(files))
        # The same weights, and nothing vLLM fetched is missing from the download.
        assert sorted(p for p in fetched if is_weight_file(p)) == [
            f.path for f in chosen.weights
        ], repo_id
        assert set(fetched) <= set(chosen.patterns), (repo_id, set(fetched) - set(chosen.patterns))

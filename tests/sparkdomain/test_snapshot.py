"""A model snapshot in a Hugging Face hub cache, read as vLLM reads it before loading
(sparkdomain/snapshot.py): config.json, ModelOpt's hf_quant_config.json, and the weights'
size — the safetensors files, else the index's metadata.total_size."""

from __future__ import annotations

import json

import pytest

from sparkdomain.snapshot import (
    SnapshotError,
    hub_cache_dir,
    read_snapshot,
    with_quantization,
)

COMMIT = "e" * 40


def _snapshot(root, repo_id="org/model", files=None, ref="main"):
    folder = root / ("models--" + repo_id.replace("/", "--"))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / ref).write_text(COMMIT)
    snap = folder / "snapshots" / COMMIT
    snap.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        data = content if isinstance(content, bytes) else json.dumps(content).encode()
        (snap / name).write_bytes(data)
    return snap


def test_the_size_is_the_weight_files_else_the_index_total(tmp_path):
    index = {"metadata": {"total_size": 5_000}, "weight_map": {}}
    _snapshot(tmp_path, files={"config.json": {"num_hidden_layers": 2},
                               "model.safetensors.index.json": index})  # fmt: skip
    found = read_snapshot(tmp_path, "org/model")
    assert (found.commit, found.size_bytes, found.size_from) == (COMMIT, 5_000, "index")
    _snapshot(tmp_path, files={"model-00001-of-00001.safetensors": b"x" * 1234})
    found = read_snapshot(tmp_path, "org/model")
    assert (found.size_bytes, found.size_from) == (1234, "files")


def test_modelopts_quant_config_is_folded_in_unless_config_has_one(tmp_path):
    quant = {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}}
    _snapshot(tmp_path, files={"config.json": {"num_hidden_layers": 2},
                               "hf_quant_config.json": quant})  # fmt: skip
    found = read_snapshot(tmp_path, "org/model")
    merged = with_quantization(found.config, found.quant_config)
    assert merged["quantization_config"] == {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                             "exclude_modules": ["lm_head"]}  # fmt: skip
    own = {"quantization_config": {"quant_method": "fp8"}}
    assert with_quantization(own, found.quant_config) is own


def test_nothing_is_read_outside_the_cache_and_bad_files_say_what(tmp_path):
    assert read_snapshot(tmp_path, "org/model") is None  # not in the cache
    assert read_snapshot(tmp_path, "../etc") is None
    assert read_snapshot(tmp_path, "org/model", "../../x") is None
    _snapshot(tmp_path, files={"config.json": b"{not json"})
    with pytest.raises(SnapshotError, match=r"config\.json is not JSON"):
        read_snapshot(tmp_path, "org/model")
    _snapshot(tmp_path, files={"config.json": b"[1, 2]"})
    with pytest.raises(SnapshotError, match="not a JSON object"):
        read_snapshot(tmp_path, "org/model")


def test_the_cache_is_where_huggingface_hub_looks():
    assert str(hub_cache_dir({"HF_HUB_CACHE": "/a"})) == "/a"
    assert str(hub_cache_dir({"HF_HOME": "/h"})) == "/h/hub"
    assert str(hub_cache_dir({})).endswith(".cache/huggingface/hub")

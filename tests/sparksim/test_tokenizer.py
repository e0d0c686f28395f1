"""The simulator's tokenizer and text corpus: reversible, deterministic, realistic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparksim.corpus import REASONING_SENTENCES, TextStream, stream_seed
from sparksim.tokenizer import (
    DEFAULT_TOKENIZER,
    IM_END,
    IM_START,
    NUM_BYTE_TOKENS,
    SPECIAL_TOKENS,
    Tokenizer,
    apply_chat_template,
    pre_tokenize,
)

ROOT = Path(__file__).resolve().parents[2]
TOK = DEFAULT_TOKENIZER

ENGLISH = (
    "The quick brown fox jumps over the lazy dog. Memory bandwidth, not compute, "
    "limits how fast a model can decode: every token reads all of the weights!"
)
UNICODE = "naïve café — 東京 🚀"
WHITESPACE = "line one\n\n  indented\tline two\r\n   trailing   \n\n\n"

# Pinned on purpose: a change to the vocabulary or the splitting rules shows up here.
PINNED = {
    "The quick brown fox jumps over the lazy dog.": 15,
    "Hello, world! How many tokens is this sentence, exactly?": 13,
    "Explain why decoding on a DGX Spark is limited by memory bandwidth.": 13,
}


@pytest.mark.parametrize("text", [ENGLISH, UNICODE, WHITESPACE, "", " ", "\n", "🚀🚀x"])
def test_round_trip(text: str) -> None:
    assert TOK.decode(TOK.encode(text)) == text


def test_round_trip_lone_surrogate() -> None:
    # Legal in a Python str even though it is not valid Unicode text.
    text = "bad \ud800 surrogate"
    assert TOK.decode(TOK.encode(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_round_trip_any_text(text: str) -> None:
    assert "".join(pre_tokenize(text)) == text
    assert TOK.decode(TOK.encode(text)) == text


def test_deterministic_across_instances() -> None:
    a, b = Tokenizer(), Tokenizer()
    for text in (ENGLISH, UNICODE, WHITESPACE):
        assert a.encode(text) == b.encode(text) == TOK.encode(text)
    assert a.vocab_size == b.vocab_size


def test_deterministic_across_processes() -> None:
    texts = [ENGLISH, UNICODE, WHITESPACE, "rare zygomorphic words"]
    script = (
        "import json, sys\n"
        "from sparksim.tokenizer import DEFAULT_TOKENIZER as T\n"
        "from sparksim.corpus import TextStream, stream_seed\n"
        "texts = json.loads(sys.stdin.read())\n"
        "print(json.dumps({'ids': [T.encode(t) for t in texts], 'size': T.vocab_size,\n"
        "  'stream': TextStream(7).next_ids(300), 'seed': stream_seed('m', 'p', 3)}))\n"
    )
    expected = {
        "ids": [TOK.encode(t) for t in texts],
        "size": TOK.vocab_size,
        "stream": TextStream(7).next_ids(300),
        "seed": stream_seed("m", "p", 3),
    }
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            check=True,
            timeout=60,
        )
        assert json.loads(result.stdout) == expected


@pytest.mark.parametrize(("text", "count"), PINNED.items())
def test_pinned_counts(text: str, count: int) -> None:
    assert TOK.count(text) == count


def test_count_is_len_encode() -> None:
    for text in (ENGLISH, UNICODE, WHITESPACE, ""):
        assert TOK.count(text) == len(TOK.encode(text))


@pytest.mark.parametrize(
    "word", ["the", " the", "The", " memory", " bandwidth", " garden", " because", " 42", "."]
)
def test_common_pieces_are_one_token(word: str) -> None:
    ids = TOK.encode(word)
    assert len(ids) == 1
    assert ids[0] >= NUM_BYTE_TOKENS
    assert TOK.token_text(ids[0]) == word


def test_english_is_about_one_token_per_word() -> None:
    words = len(ENGLISH.split())
    assert words <= TOK.count(ENGLISH) <= 1.4 * words


def test_rare_word_splits_into_pieces_and_exotic_text_into_bytes() -> None:
    ids = TOK.encode(" playfulness")
    assert [TOK.token_text(i) for i in ids] == [" play", "ful", "ness"]
    ids = TOK.encode("東")
    assert ids == list("東".encode())
    assert all(TOK.token_text(i) == "" for i in ids)  # partial UTF-8 on its own


def test_decode_rejects_unknown_ids() -> None:
    with pytest.raises(ValueError):
        TOK.decode([TOK.vocab_size])
    with pytest.raises(ValueError):
        TOK.decode([-1])


def test_chat_template_markers_are_single_tokens() -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}],
        },
    ]
    prompt = apply_chat_template(messages)
    assert prompt == (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\nHi\nthere<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert not apply_chat_template(messages, add_generation_prompt=False).endswith("assistant\n")
    ids = TOK.encode(prompt)
    start, end = TOK.special_id(IM_START), TOK.special_id(IM_END)
    assert ids.count(start) == 3
    assert ids.count(end) == 2
    assert TOK.decode(ids) == prompt
    for special in SPECIAL_TOKENS:
        assert TOK.encode(special) == [TOK.special_id(special)]
    # Glued to punctuation, a marker still stays whole.
    assert TOK.encode("!" + IM_END) == [TOK.encode("!")[0], end]


def test_encode_one_megabyte() -> None:
    text = (ENGLISH + " " + UNICODE + "\n") * (1_000_000 // (len(ENGLISH) + len(UNICODE) + 2))
    ids = TOK.encode(text)  # a guard against pathological slowness, not a benchmark
    assert TOK.decode(ids) == text


# --- corpus -------------------------------------------------------------------------


def test_stream_same_seed_same_ids() -> None:
    assert TextStream(42).next_ids(500) == TextStream(42).next_ids(500)
    a, b = TextStream(42), TextStream(42)
    assert a.next_ids(10) + a.next_ids(490) == b.next_ids(500)


def test_stream_different_seeds_differ() -> None:
    firsts = {tuple(TextStream(seed).next_ids(50)) for seed in range(20)}
    assert len(firsts) >= 15


def test_stream_is_readable_text() -> None:
    for seed in (0, 1, 99):
        ids = TextStream(seed).next_ids(1000)
        assert all(i >= NUM_BYTE_TOKENS for i in ids)  # no byte fallback
        text = TOK.decode(ids[:200])
        plain = sum(c.isascii() and (c.isalpha() or c in " .,;:'-!?\n") for c in text)
        assert plain / len(text) > 0.97
        assert not text.startswith(" ")


def test_stream_cycles_forever() -> None:
    stream = TextStream(3)
    ids = stream.next_ids(20_000)  # several times the whole corpus
    assert len(ids) == 20_000
    assert stream.next_ids(0) == []


def test_reasoning_stream() -> None:
    ids = TextStream(5, kind="reasoning").next_ids(300)
    assert all(i >= NUM_BYTE_TOKENS for i in ids)
    text = TOK.decode(ids)
    assert any(sentence in text for sentence in REASONING_SENTENCES)
    assert TextStream(5, kind="reasoning").next_ids(300) == ids
    with pytest.raises(ValueError):
        TextStream(5, kind="poetry")


def test_stream_seed_is_stable_and_distinguishes_parts() -> None:
    assert stream_seed("model", "prompt", 0) == stream_seed("model", "prompt", 0)
    assert stream_seed("ab", "c") != stream_seed("a", "bc")
    assert stream_seed("1") != stream_seed(1)
    assert 0 <= stream_seed("x") < 2**64

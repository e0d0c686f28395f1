"""sparksim's demo mode (`--answers markdown`, issue 43): answers made of whole Markdown
blocks of every kind the chat renders, varied per model and per seed, while the prose
mode — what every other test relies on — stays exactly as it was."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from sparksim.arguments import build_parser, split_sim_flags
from sparksim.corpus import MARKDOWN_BLOCKS, TextStream
from sparksim.engine import SimRequest
from sparksim.tokenizer import DEFAULT_TOKENIZER, NUM_BYTE_TOKENS
from tests.sparksim.conftest import NEMOTRON_FLAGS

TOK = DEFAULT_TOKENIZER
PINS = json.loads((Path(__file__).with_name("prose_pins.json")).read_text())

# One pattern per kind of block the chat renders (static/js/markdown.js), line by line.
KINDS = {
    "heading": r"^#{2,3} \w",
    "bulleted list": r"^- \w",
    "nested list": r"^  - \w",
    "numbered list": r"^\d\. \w",
    "table": r"^\|(?: [^|\n]+ \|)+\n\|(?::?-{3,}:?\|)+$",
    "fenced code with a language": r"^```(?:python|bash|json|yaml)$",
    "inline math": r"[^$]\$[^\s$][^$\n]*[^\s$\\]\$(?!\d)",
    "display math": r"^\$\$\n[^$]+\n\$\$$",
    "block quote": r"^> \w",
}


def _kinds(text: str) -> set[str]:
    return {kind for kind, pattern in KINDS.items() if re.search(pattern, text, re.MULTILINE)}


# --- the prose mode is what it was ------------------------------------------------------


@pytest.mark.parametrize("seed", sorted(PINS["stream_first_200"]))
def test_the_prose_stream_gives_the_ids_it_gave_before_the_markdown_blocks(seed: str) -> None:
    assert TextStream(int(seed)).next_ids(200) == PINS["stream_first_200"][seed]


def test_every_earlier_vocabulary_piece_keeps_its_id_and_the_blocks_come_after() -> None:
    size = PINS["vocabulary_size"]
    earlier = "\0".join(TOK.token_text(i) for i in range(size))
    digest = hashlib.sha256(earlier.encode("utf-8", "surrogatepass")).hexdigest()
    assert digest == PINS["vocabulary_sha256"]
    # The blocks added pieces of their own (after the prose's), e.g. the language names.
    assert TOK.vocab_size > size
    assert TOK.piece_id("python") >= size


def test_a_prose_request_is_not_salted_with_the_model() -> None:
    one = SimRequest("a", [1, 2, 3], 400, seed=7, model="org/one")
    two = SimRequest("b", [1, 2, 3], 400, seed=7, model="org/two")
    assert one.natural_length == two.natural_length
    assert [one.next_token() for _ in range(100)] == [two.next_token() for _ in range(100)]


# --- the markdown stream -----------------------------------------------------------------


def test_the_blocks_encode_without_byte_fallback_and_decode_back() -> None:
    for block in MARKDOWN_BLOCKS:
        ids = TOK.encode(block)
        assert min(ids) >= NUM_BYTE_TOKENS, block
        assert TOK.decode(ids) == block
        assert "\n\n" not in block  # a blank line separates blocks, never splits one


@pytest.mark.parametrize("seed", [0, 1, 99, 2**63 + 5])
def test_a_few_thousand_tokens_hold_every_kind_of_block_without_byte_fallback(seed) -> None:
    ids = TextStream(seed, kind="markdown").next_ids(3000)
    assert min(ids) >= NUM_BYTE_TOKENS
    text = TOK.decode(ids)
    assert _kinds(text) == set(KINDS)
    # It starts at the start of a block, and the blocks are separated by blank lines.
    whole = text[: text.rindex("\n\n")].split("\n\n")
    assert set(whole) <= set(MARKDOWN_BLOCKS)
    assert len(whole) > len(MARKDOWN_BLOCKS)  # it goes round the corpus again


def test_the_stream_starts_at_a_seed_dependent_block() -> None:
    firsts = {TOK.decode(TextStream(seed, kind="markdown").next_ids(8)) for seed in range(30)}
    assert len(firsts) >= 8
    assert all(any(b.startswith(first) for b in MARKDOWN_BLOCKS) for first in firsts)


def _markdown(seed: int | None, model: str, prompt=(1, 2, 3), **kw) -> tuple[str, SimRequest]:
    request = SimRequest("r", list(prompt), 4000, seed=seed, answers="markdown", model=model, **kw)
    ids = [request.next_token()[0] for _ in range(request.natural_length)]
    return TOK.decode(ids), request


def test_same_seed_and_model_same_answer_another_model_another_answer() -> None:
    text, _ = _markdown(5, "nvidia/Qwen3.5-35B-A3B-NVFP4")
    again, _ = _markdown(5, "nvidia/Qwen3.5-35B-A3B-NVFP4")
    other, _ = _markdown(5, "openai/gpt-oss-120b")
    assert text == again
    assert text != other
    # Without a seed the prompt picks the text, still salted with the model.
    assert _markdown(None, "a", prompt=(9, 9))[0] != _markdown(None, "b", prompt=(9, 9))[0]
    assert _markdown(None, "a", prompt=(9, 9))[0] == _markdown(None, "a", prompt=(9, 9))[0]


def test_an_answer_that_stops_on_its_own_ends_after_three_to_six_whole_blocks() -> None:
    counts = set()
    for seed in range(12):
        text, request = _markdown(seed, "demo")
        blocks = text.split("\n\n")
        assert all(block in MARKDOWN_BLOCKS for block in blocks), text
        counts.add(len(blocks))
        # The next token would have been the blank line before the next block.
        assert TOK.decode([request.next_token()[0]]) == "\n\n"
    assert counts <= {3, 4, 5, 6}
    assert len(counts) > 1


def test_reasoning_stays_prose_in_the_markdown_mode() -> None:
    request = SimRequest("r", [1, 2], 400, seed=3, answers="markdown", model="m",
                         reasoning_tokens=40)  # fmt: skip
    tokens = [request.next_token() for _ in range(40)]
    assert all(reasoning for _, reasoning in tokens)
    thought = TOK.decode([tid for tid, _ in tokens])
    assert not _kinds(thought) and "|" not in thought and "`" not in thought


# --- the flag ----------------------------------------------------------------------------


def test_the_answers_flag_is_a_simulator_flag_anywhere_in_the_vector() -> None:
    sim, rest = split_sim_flags(["m", "--answers", "markdown", "--max-model-len", "8192"])
    assert sim == ["--answers", "markdown"]
    assert rest == ["m", "--max-model-len", "8192"]
    assert build_parser().parse_args(["serve", *sim]).answers == "markdown"
    assert build_parser().parse_args(["serve"]).answers == "prose"
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", "--answers", "html"])
    assert exited.value.code == 2


# --- through a real server ---------------------------------------------------------------


def test_a_markdown_server_answers_the_chat_endpoint_with_a_table_and_fenced_code(start_sim):
    sim = start_sim(*NEMOTRON_FLAGS, "--answers", "markdown", time_scale=200)
    with sim.client() as client:
        body = {"model": sim.model, "messages": [{"role": "user", "content": "Show me."}]}
        # One pass over the corpus is about 1,020 tokens: every block, the table included.
        whole = client.post("/v1/chat/completions",
                            json={**body, "max_tokens": 1100, "ignore_eos": True})  # fmt: skip
        assert whole.status_code == 200, whole.text
        content = whole.json()["choices"][0]["message"]["content"]
        assert re.search(KINDS["table"], content, re.MULTILINE)
        assert re.search(r"^```python\n.+?\n```$", content, re.MULTILINE | re.DOTALL)
        assert _kinds(content) == set(KINDS)
        # Stopping on its own, it ends on a whole block; a seed gives the same answer again.
        first = client.post("/v1/chat/completions", json={**body, "seed": 11}).json()
        again = client.post("/v1/chat/completions", json={**body, "seed": 11}).json()
    answer = first["choices"][0]
    assert answer["finish_reason"] == "stop"
    assert all(block in MARKDOWN_BLOCKS for block in answer["message"]["content"].split("\n\n"))
    assert again["choices"][0]["message"]["content"] == answer["message"]["content"]

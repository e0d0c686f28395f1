"""A deterministic, reversible, dependency-free tokenizer for the simulator.

Why not a real tokenizer: the simulator must start instantly, offline and without
downloading tokenizer files, yet produce token counts that behave like a real
model's (roughly one token per common English word, more for rare words, bytes for
anything exotic) so that prompt lengths, KV-cache pressure and throughput look right.

Design, in three layers:

1. Pre-tokenization. One compiled regex splits text into pieces, like GPT-2's:
   special markers (``<|im_start|>`` ...) first, English contractions (``'s``),
   words with at most one leading space (``" hello"``), digits in groups of up to
   three with at most one leading space (``" 202"``, ``"5"``), runs of punctuation
   with at most one leading space (``" ("``, ``"."``), and whitespace runs. When a
   whitespace run is followed by a non-space character, its final space is left to
   that character, so ``"a   b"`` splits as ``"a" "  " " b"`` and the word keeps
   its usual one-token form.
   The alternatives cover every possible character, so joining the pieces always
   gives the input back (the basis of ``decode(encode(t)) == t``).

2. Vocabulary. Ids 0-255 are the 256 byte values (byte fallback, as in byte-fallback
   BPE). Then come the special tokens, then a fixed, built-in list of pieces in a fixed
   order (``sparksim.vocabulary``): ~2,000 common English words (with simple generated
   inflections, ~3,800 in all) in four forms each (``word``, ``" word"``, ``Word``,
   ``" Word"``), acronyms and names that keep their case, single letters and common sub-word
   pieces for the fallback, punctuation and whitespace pieces, and the digit groups
   0-999 with and without a leading space. Last come the pieces of the built-in text
   corpus (``sparksim.corpus``) that the lists above miss, sorted, and after them the
   pieces of its Markdown demo blocks that are still missing, sorted, so everything the
   simulated model "writes" is whole-word tokens (about 18,600 ids in all). An ASCII
   character with no piece of its own (a control character) encodes as its byte id. Ids
   depend only on list order and sorting, never on ``hash()`` or set iteration, so they
   are identical across processes and runs; editing the corpus can only move the ids of
   corpus-only pieces.

3. Encoding. A piece in the vocabulary is one token (one dict lookup, which is what
   makes encode fast: 5-8 million characters a second here). Any other piece is split
   greedily into the longest vocabulary prefixes (so ``" playfulness"`` becomes
   ``" play" "ful" "ness"``), and a character no prefix covers falls back to its
   UTF-8 bytes, one token per byte. Unknown pieces are cached.

Decoding concatenates the bytes of every id and decodes them as UTF-8 once, so
byte-fallback ids that each hold part of a multi-byte character reassemble. Lone
surrogates (legal in a Python ``str``) survive via ``surrogatepass``.

The vocabulary is built lazily on first use because it includes the corpus, and
``sparksim.corpus`` itself imports this module.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparksim.vocabulary import base_pieces

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
)
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

NUM_BYTE_TOKENS = 256

# --- pre-tokenization ---------------------------------------------------------------

_SPECIAL_ALT = "|".join(re.escape(s) for s in SPECIAL_TOKENS)
_PIECE_RE = re.compile(
    "|".join(
        (
            _SPECIAL_ALT,
            r"'(?:s|t|re|ve|m|ll|d)",
            r" ?[^\W\d_]+",
            r" ?\d{1,3}",
            # A punctuation run stops in front of a special marker so that the marker
            # stays one token even when glued to punctuation.
            rf" ?(?:(?!{_SPECIAL_ALT})(?:[^\s\w]|_))+",
            r"\s+(?= \S)",
            r"\s+",
        )
    )
)


def pre_tokenize(text: str) -> list[str]:
    """Split ``text`` into pieces; ``"".join(pre_tokenize(t)) == t`` for any string."""
    return _PIECE_RE.findall(text)


def _to_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class Tokenizer:
    """Byte-fallback word-level tokenizer; see the module docstring for the design."""

    _UNKNOWN_CACHE_LIMIT = 100_000
    _CACHE_PIECE_MAX_LEN = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._piece_to_id: dict[str, int] | None = None
        self._id_to_bytes: list[bytes] = []
        self._id_to_text: list[str] = []
        self._prefixes: frozenset[str] = frozenset()
        self._unknown_cache: dict[str, tuple[int, ...]] = {}

    # -- vocabulary -------------------------------------------------------------------

    def _vocab(self) -> dict[str, int]:
        vocab = self._piece_to_id
        if vocab is None:
            with self._lock:
                vocab = self._piece_to_id
                if vocab is None:
                    vocab = self._build()
        return vocab

    def _build(self) -> dict[str, int]:
        # Imported here, not at the top: sparksim.corpus imports this module.
        from sparksim import corpus

        id_to_text: list[str] = []
        id_to_bytes: list[bytes] = []
        piece_to_id: dict[str, int] = {}
        for b in range(NUM_BYTE_TOKENS):
            id_to_bytes.append(bytes([b]))
            # Bytes >= 0x80 are partial UTF-8 on their own: no text of their own.
            id_to_text.append(chr(b) if b < 0x80 else "")

        def add(piece: str) -> None:
            if piece in piece_to_id:
                return
            piece_to_id[piece] = len(id_to_text)
            id_to_text.append(piece)
            id_to_bytes.append(_to_bytes(piece))

        for special in SPECIAL_TOKENS:
            add(special)
        for piece in base_pieces():
            add(piece)
        # Sorted so that the ids do not depend on the order of the corpus paragraphs.
        # Each word also gets its form with (or without) a leading space: a stream may
        # start on a word that the corpus only has mid-sentence, and vice versa.
        found = {piece for text in corpus.all_texts() for piece in pre_tokenize(text)}
        words = {p.lstrip(" ") for p in found if p.lstrip(" ")[:1].isalpha()}
        found |= words | {" " + w for w in words}
        corpus_pieces = sorted(found)
        for piece in corpus_pieces:
            add(piece)
        # The Markdown demo blocks' pieces come after every prose piece, so that adding
        # them moved no id the prose stream and the prompts had (add skips known pieces).
        for piece in sorted({p for text in corpus.markdown_texts() for p in pre_tokenize(text)}):
            add(piece)
        # Any other single ASCII character (control characters, mostly) is its byte id:
        # encoding it never needs the fallback path, and the id decodes on its own.
        for b in range(0x80):
            piece_to_id.setdefault(chr(b), b)

        self._id_to_text = id_to_text
        self._id_to_bytes = id_to_bytes
        # Every prefix of every piece: the fallback stops searching as soon as its
        # candidate is no longer the start of any piece.
        self._prefixes = frozenset(p[:k] for p in piece_to_id for k in range(1, len(p) + 1))
        # Published last: other threads read _piece_to_id without the lock.
        self._piece_to_id = piece_to_id
        return piece_to_id

    @property
    def vocab_size(self) -> int:
        self._vocab()
        return len(self._id_to_text)

    def special_id(self, token: str) -> int:
        """The id of a special marker such as ``<|im_end|>``."""
        if token not in SPECIAL_TOKENS:
            raise KeyError(f"not a special token: {token!r}")
        return self._vocab()[token]

    def piece_id(self, piece: str) -> int | None:
        """The id of ``piece`` when it is a single vocabulary entry, else ``None``."""
        return self._vocab().get(piece)

    # -- encode / decode --------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        vocab = self._vocab()
        get = vocab.get
        ids: list[int] = []
        append = ids.append
        for piece in _PIECE_RE.findall(text):
            tid = get(piece)
            if tid is None:
                ids.extend(self._encode_unknown(piece))
            else:
                append(tid)
        return ids

    def _encode_unknown(self, piece: str) -> tuple[int, ...]:
        cached = self._unknown_cache.get(piece)
        if cached is not None:
            return cached
        get = self._vocab().get
        prefixes = self._prefixes
        out: list[int] = []
        i, n = 0, len(piece)
        while i < n:
            # Greedy longest vocabulary prefix, found by extending the candidate while
            # it still starts some piece (linear even for a megabyte without spaces).
            best_end, best_id = i, -1
            j = i + 1
            while j <= n and piece[i:j] in prefixes:
                tid = get(piece[i:j])
                if tid is not None:
                    best_end, best_id = j, tid
                j += 1
            if best_id >= 0:
                out.append(best_id)
                i = best_end
            else:
                # No piece starts here: the character's UTF-8 bytes, one id per byte.
                out.extend(_to_bytes(piece[i]))
                i += 1
        result = tuple(out)
        # Long pieces are rarely repeated; caching them would only hold memory.
        if len(piece) <= self._CACHE_PIECE_MAX_LEN:
            if len(self._unknown_cache) >= self._UNKNOWN_CACHE_LIMIT:
                self._unknown_cache.clear()
            self._unknown_cache[piece] = result
        return result

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: Iterable[int]) -> str:
        self._vocab()
        table = self._id_to_bytes
        ids = list(ids)
        # A negative index would silently pick from the end of the table.
        if ids and min(ids) < 0:
            raise ValueError(f"token id out of range 0..{len(table) - 1}")
        try:
            data = b"".join([table[i] for i in ids])
        except (IndexError, TypeError) as exc:
            raise ValueError(f"token id out of range 0..{len(table) - 1}") from exc
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            # Arbitrary id sequences (not produced by encode) can hold invalid UTF-8.
            return data.decode("utf-8", "replace")

    def token_text(self, token_id: int) -> str:
        """The text of one id; ``""`` for a byte id >= 0x80 (part of a character)."""
        self._vocab()
        if token_id < 0 or token_id >= len(self._id_to_text):
            raise ValueError(f"token id out of range: {token_id}")
        return self._id_to_text[token_id]

    def is_byte_fallback(self, token_id: int) -> bool:
        return 0 <= token_id < NUM_BYTE_TOKENS


# --- chat template ------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                texts.append(str(part.get("text", "")))
            # Other part types (images, audio) carry no text for this model.
        # vLLM joins the text parts of one message with newlines.
        return "\n".join(texts)
    raise TypeError(f"message content must be a string or a list of parts, not {content!r}")


def apply_chat_template(
    messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True
) -> str:
    """ChatML, as Qwen-style models use: ``<|im_start|>{role}\\n{content}<|im_end|>\\n``.

    With ``add_generation_prompt`` the text ends in ``<|im_start|>assistant\\n`` so the
    model's reply follows directly. The markers encode as single special tokens.
    """
    parts: list[str] = []
    for message in messages:
        role = str(message.get("role", "user"))
        content = _content_text(message.get("content"))
        parts.append(f"{IM_START}{role}\n{content}{IM_END}\n")
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


DEFAULT_TOKENIZER = Tokenizer()

"""The user docs and pages tell the truth about what exists.

A doc that defers a feature to "a later issue" goes stale the day the feature lands (the
run page's Chat action, the host agent and the Responses API all existed while the docs
still said they did not). Unfinished work is described where it is — in a "Not done yet"
section that names what is missing — never by pointing at an unnamed future.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

# Phrases that point at an unnamed future instead of saying what exists.
DEFERRING = re.compile(
    r"later issues?|not here yet|a later session|future issues?|coming soon|planned, not built",
    re.IGNORECASE,
)


def _texts() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    files += sorted((ROOT / "templates").rglob("*.html"))
    return files


def _hits(pattern: re.Pattern, files: list[Path], root: Path = ROOT) -> list[str]:
    out = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(root)}:{n}: {line.strip()[:120]}")
    return out


def test_no_doc_or_page_defers_to_a_later_issue():
    hits = _hits(DEFERRING, _texts())
    assert not hits, "say what exists, or list what is missing under 'Not done yet':\n" + "\n".join(
        hits
    )


def test_the_check_catches_a_deferring_phrase(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "Scripts queue jobs through the API.\nThe command line is a later issue.\n"
        "**Not here yet**: the watchdog.\n",
        encoding="utf-8",
    )
    assert [h.split(":")[1] for h in _hits(DEFERRING, [doc], tmp_path)] == ["2", "3"]


def test_the_docs_stand_without_the_workshop_files():
    """The project is understood from its own docs: none sends a reader outside the repo
    (docs/BENCHMARKS.md's commands name the checkers they were measured with)."""
    outside = re.compile(r"\.\./shared\b")
    files = [p for p in _texts() if p.name != "BENCHMARKS.md"]
    assert not _hits(outside, files)

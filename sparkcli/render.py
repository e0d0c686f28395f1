"""What the command line prints: times and durations, a job's progress line and bar, a
job's status lines, plain tables, the stdout/stderr pair and the progress display on stderr."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from sparkcli.client import ACTIVE_STATES, EXIT_USAGE, CliError


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def when(value: str | None, now: datetime | None = None) -> str:
    """An ISO timestamp as local time with how far away it is: "14:05:10 (in 3 min)"."""
    moment = _parse_time(value)
    if moment is None:
        return "unknown"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    delta = (moment - now).total_seconds()
    local = moment.astimezone().strftime("%H:%M:%S")
    if abs(delta) < 5:
        return f"{local} (now)"
    span = duration(abs(delta))
    return f"{local} (in {span})" if delta > 0 else f"{local} ({span} ago)"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return (
            f"{seconds // 60} min {seconds % 60:02d} s" if seconds < 600 else f"{seconds // 60} min"
        )
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def progress_text(job: dict) -> str:
    """One line about where a job stands (no bar): state, queue place or step, percent."""
    state = job.get("state", "?")
    progress = job.get("progress") or {}
    head = f"job {job.get('id')} {state}"
    if state == "queued":
        position = job.get("position")
        parts = [head]
        if position is not None:
            parts.append("next in line" if position == 1 else f"position {position}")
        if job.get("estimated_start"):
            parts.append(f"estimated start {when(job['estimated_start'])}")
        return ", ".join(parts)
    step = progress.get("step") or ""
    if state in ("running", "cancelling") and progress.get("total"):
        counts = f"{progress.get('done', 0)}/{progress['total']} requests"
        return f"{head}: {step} ({counts})" if step else f"{head} ({counts})"
    return f"{head}: {step}" if step else head


def percent_of(job: dict) -> float | None:
    progress = job.get("progress") or {}
    if job.get("state") == "done":
        return 100.0
    value = progress.get("percent")
    if isinstance(value, int | float):
        return max(0.0, min(100.0, float(value)))
    done, total = progress.get("done"), progress.get("total")
    if isinstance(done, int | float) and isinstance(total, int | float) and total > 0:
        return max(0.0, min(100.0, 100.0 * done / total))
    return None


def progress_bar(job: dict, width: int = 100) -> str:
    """`job 12 running [#########.........]  45 % Measuring sweep at 2 concurrent`, cut to
    `width` characters."""
    percent = percent_of(job)
    bar_width = 20
    if percent is None:
        bar = "[" + "." * bar_width + "]   ? %"
    else:
        filled = round(bar_width * percent / 100)
        bar = "[" + "#" * filled + "." * (bar_width - filled) + f"] {percent:3.0f} %"
    text = progress_text(job)
    head = f"job {job.get('id')} {job.get('state', '?')}"
    rest = text[len(head) :].lstrip(":, ")
    line = f"{head} {bar} {rest}".rstrip()
    return line if len(line) <= width else line[: max(0, width - 1)] + "…"


def job_lines(job: dict) -> list[str]:
    """`status JOB_ID`: what a person wants to know about one job."""
    lines = [
        f"job {job['id']}: {job.get('state')} — {job.get('recipe')} on {job.get('host')}, "
        f"suite {job.get('suite')!r}"
        + (f", queued by {job['queued_by']}" if job.get("queued_by") else "")
    ]
    if job.get("note"):
        lines.append(f"  note: {job['note']}")
    state = job.get("state")
    if state == "queued":
        position = job.get("position")
        if position is not None:
            lines.append(f"  position: {position} (1 = next)")
        if job.get("estimated_start"):
            lines.append(f"  estimated start: {when(job['estimated_start'])}")
        if job.get("estimate_s"):
            lines.append(f"  similar jobs take: {duration(job['estimate_s'])}")
    elif state in ACTIVE_STATES:
        progress = job.get("progress") or {}
        if progress.get("step"):
            lines.append(f"  step: {progress['step']}")
        percent = percent_of(job)
        if percent is not None:
            counts = (
                f" ({progress.get('done', 0)}/{progress['total']} requests)"
                if progress.get("total")
                else ""
            )
            lines.append(f"  progress: {percent:.0f} %{counts}")
        if job.get("started_at"):
            lines.append(f"  started: {when(job['started_at'])}")
    else:
        if job.get("duration_s") is not None:
            lines.append(f"  took: {duration(job['duration_s'])}")
        if job.get("finished_at"):
            lines.append(f"  finished: {when(job['finished_at'])}")
    summary = job.get("summary") or {}
    if summary.get("capacity_text"):
        lines.append(f"  capacity: {summary['capacity_text']}")
    if job.get("error"):
        lines.append(f"  error: {job['error']}")
    if job.get("results_url") and state not in ("queued", "preparing"):
        lines.append(f"  results: sparkpanel results {job['id']} [--format csv]")
    return lines


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for row in [header, *rows]:
        out.append("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)))
    return "\n".join(line.rstrip() for line in out)


@dataclass
class Io:
    out: TextIO
    err: TextIO

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        print(text, file=self.err, flush=True)


class ProgressDisplay:
    """The progress bar on stderr: one `\\r`-updated line on a terminal, otherwise a plain
    line when the state or step changes, every 10 % or at least once a minute."""

    def __init__(self, stream: TextIO, tty: bool | None = None, quiet_s: float = 60.0):
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.quiet_s = quiet_s
        self.last_key: tuple | None = None
        self.last_percent: float | None = None
        self.last_time = 0.0
        self.drawn = False

    def update(self, job: dict) -> None:
        if self.tty:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + progress_bar(job, width).ljust(width))
            self.stream.flush()
            self.drawn = True
            return
        progress = job.get("progress") or {}
        key = (job.get("state"), progress.get("step") if job.get("state") != "queued" else None)
        percent = percent_of(job)
        now = time.monotonic()
        if (
            key != self.last_key
            or (
                percent is not None
                and (self.last_percent is None or percent - self.last_percent >= 10)
            )
            or now - self.last_time >= self.quiet_s
        ):
            self.stream.write(progress_bar(job, 160) + "\n")
            self.stream.flush()
            self.last_key, self.last_percent, self.last_time = key, percent, now

    def end(self) -> None:
        if self.tty and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def write_text(text: str, path: str | None, io: Io) -> None:
    """`text` to stdout (no path or `-`) or to the file `path` (noted on stderr)."""
    if not path or path == "-":
        io.out.write(text if text.endswith("\n") else text + "\n")
        io.out.flush()
        return
    try:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}", EXIT_USAGE) from None
    io.note(f"wrote {path}")

"""`compare` and its regression check (pure, tested on canned dicts): results keyed by shape,
`--max-decode-drop`, and the comparison table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkcli.render import table

Shape = tuple[str, int, int, int]


def shape_of(result: dict) -> Shape | None:
    try:
        return (
            str(result["kind"]),
            int(result["input_len"]),
            int(result["output_len"]),
            int(result["max_concurrency"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def shape_label(shape: Shape) -> str:
    kind, input_len, output_len, concurrency = shape
    if kind == "scenario" and concurrency == 1:
        return f"single {input_len}/{output_len}"
    return f"{kind} {input_len}/{output_len} ×{concurrency}"


def results_by_shape(job: dict) -> dict[Shape, dict]:
    """A job's results keyed by (kind, input_len, output_len, max_concurrency); if a suite
    measured the same shape twice, the first one counts."""
    out: dict[Shape, dict] = {}
    for result in job.get("results") or []:
        shape = shape_of(result)
        if shape is not None and shape not in out:
            out[shape] = result
    return out


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _decode_tps(result: dict) -> float | None:
    """A result's median decode tok/s, or None where the export says `decode_timed: false`
    (too short to time: the number is noise, so it is never compared)."""
    if result.get("decode_timed") is False:
        return None
    return _number(result.get("median_decode_tok_s"))


@dataclass(frozen=True)
class Drop:
    job: Any
    baseline: Any
    shape: Shape
    baseline_tps: float
    tps: float

    @property
    def percent(self) -> float:
        return 100.0 * (self.baseline_tps - self.tps) / self.baseline_tps

    def __str__(self) -> str:
        return (
            f"job {self.job}: {shape_label(self.shape)} decode {self.tps:.1f} tok/s vs "
            f"{self.baseline_tps:.1f} in baseline job {self.baseline} "
            f"(−{self.percent:.1f} %)"
        )


@dataclass
class DecodeCheck:
    """What `--max-decode-drop` found: the drops over the limit, and jobs that share no
    measured shape with the baseline (nothing compared is not a pass)."""

    max_drop_percent: float
    compared: int
    drops: list[Drop]
    nothing_shared: list[Any]

    @property
    def ok(self) -> bool:
        return not self.drops and not self.nothing_shared


def decode_check(jobs: list[dict], max_drop_percent: float) -> DecodeCheck:
    """Compare every job after the first (the baseline) with the baseline on the shapes both
    measured: a median_decode_tok_s more than `max_drop_percent` % below the baseline's is a
    drop. Levels marked `decode_timed: false` (too short to time) are skipped on both sides."""
    if not jobs:
        return DecodeCheck(max_drop_percent, 0, [], [])
    baseline = jobs[0]
    base = {
        shape: tps
        for shape, result in results_by_shape(baseline).items()
        if (tps := _decode_tps(result)) is not None and tps > 0
    }
    drops: list[Drop] = []
    nothing_shared: list[Any] = []
    compared = 0
    for job in jobs[1:]:
        shared = 0
        for shape, result in results_by_shape(job).items():
            tps = _decode_tps(result)
            if shape not in base or tps is None:
                continue
            shared += 1
            compared += 1
            drop = Drop(job.get("job"), baseline.get("job"), shape, base[shape], tps)
            if drop.percent > max_drop_percent + 1e-9:
                drops.append(drop)
        if not shared:
            nothing_shared.append(job.get("job"))
    return DecodeCheck(max_drop_percent, compared, drops, nothing_shared)


def _fmt(value, digits: int) -> str:
    number = _number(value)
    return "–" if number is None else f"{number:.{digits}f}"


def compare_table(jobs: list[dict]) -> str:
    """One row per measured shape (in the order the jobs measured them), each job's median
    decode tok/s and median TTFT; jobs after the first show their change from it."""
    shapes: list[Shape] = []
    per_job = [results_by_shape(job) for job in jobs]
    for results in per_job:
        for shape in results:
            if shape not in shapes:
                shapes.append(shape)
    header = ["shape"]
    for job in jobs:
        header += [f"#{job.get('job')} decode tok/s", f"#{job.get('job')} TTFT ms"]
    rows = []
    base = per_job[0] if per_job else {}
    for shape in shapes:
        row = [shape_label(shape)]
        for i, results in enumerate(per_job):
            result = results.get(shape) or {}
            tps = _decode_tps(result)
            decode = "too short" if result.get("decode_timed") is False else _fmt(tps, 1)
            base_tps = _decode_tps(base.get(shape) or {})
            if i and base_tps and tps is not None:
                change = 100.0 * (tps - base_tps) / base_tps
                decode += f" ({change:+.1f} %)".replace("-", "−")
            row += [decode, _fmt(result.get("median_ttft_ms"), 0)]
        rows.append(row)
    if not rows:
        return "No measured results to compare."
    return table(rows, header)


def compare_context(jobs: list[dict]) -> list[str]:
    lines = []
    for i, job in enumerate(jobs):
        recipe = (job.get("recipe") or {}).get("name", "?")
        image = (job.get("context") or {}).get("image", "")
        role = "baseline" if i == 0 else "compared"
        lines.append(
            f"#{job.get('job')} ({role}): {job.get('state')}, {recipe} on {job.get('host')}"
            + (f", image {image}" if image else "")
        )
        capacity = job.get("capacity") or {}
        if capacity.get("text"):
            lines.append(f"    {capacity['text']}")
    return lines

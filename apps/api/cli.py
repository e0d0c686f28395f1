"""sparkpanel: the command line for a (remote) SparkPanel, a client of its JSON API.

It needs only httpx (no Django): install the package on a laptop or CI box and run
`sparkpanel …`, or `python -m apps.api.cli …`, or on the panel machine `manage.py spark …`.

    export SPARKPANEL_URL=http://spark-panel:8000 SPARKPANEL_TOKEN=spk_…
    JOB=$(sparkpanel queue --recipe nemotron-3-super-official --host spark-01 --suite "Quick check")
    sparkpanel wait "$JOB" --timeout 3600
    sparkpanel compare "$BASELINE" "$JOB" --max-decode-drop 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
API_PREFIX = "/api/v1"
PROFILE_PATH = "/accounts/profile/"
REQUEST_TIMEOUT_S = 30.0
RETRY_STATUSES = frozenset({502, 503, 504})
RETRY_BACKOFF_S = (1.0, 2.0, 4.0)  # three retries; tests set it to zeros

# Exit codes (also in --help).
EXIT_OK = 0
EXIT_JOB_FAILED = 1  # wait: the job failed, was interrupted or cancelled
EXIT_TIMEOUT = 2  # wait: --timeout passed, the job is still active
EXIT_REGRESSION = 3  # compare --max-decode-drop: a decode rate dropped too far
EXIT_API_ERROR = 4  # the panel refused the request (bad token, no such job, invalid input…)
EXIT_UNREACHABLE = 5  # the panel could not be reached
EXIT_USAGE = 64  # bad command line (not 2, which means "timed out")

ACTIVE_STATES = ("queued", "preparing", "running", "cancelling")
FINISHED_STATES = ("done", "cancelled", "interrupted", "failed")

EPILOG = f"""\
configuration:
  --url or SPARKPANEL_URL        the panel (default {DEFAULT_URL})
  --token or SPARKPANEL_TOKEN    a personal API token (spk_…), created on the panel's
  (or SPARKPANEL_TOKEN_FILE)     profile page {PROFILE_PATH} (or by an admin on the panel
                                 machine: manage.py apitoken USERNAME --name NAME)

exit codes:
  0   success (wait: the job is done)
  1   wait: the job failed, was interrupted or was cancelled
  2   wait: --timeout passed while the job was still active (it keeps running)
  3   compare --max-decode-drop: a job's decode tok/s dropped more than allowed
  4   the panel refused the request (invalid token, permission, no such job, bad input)
  5   the panel could not be reached
  64  bad command line

nightly CI:
  JOB=$(sparkpanel queue --recipe my-recipe --host spark-01 --suite "Quick check" \\
        --note "nightly $(date +%F)") || exit
  sparkpanel wait "$JOB" --timeout 3600 || exit
  sparkpanel results "$JOB" --format csv -o "results-$JOB.csv"
  sparkpanel compare "$BASELINE_JOB" "$JOB" --max-decode-drop 5
"""


# --- talking to the panel -----------------------------------------------------------------
class CliError(Exception):
    """Ends the command with a message on stderr and an exit code."""

    def __init__(self, message: str, code: int, details: Iterable[str] = ()):
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = list(details)


class Panel:
    """The panel's API over httpx: one error shape, retries on connect errors and 502/503/504
    (requests that may have reached the panel are retried only when that is safe: reads, and
    queueing with an Idempotency-Key)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        transport: httpx.BaseTransport | None = None,
        backoff: tuple[float, ...] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.url = url
        self.token = token
        self.backoff = RETRY_BACKOFF_S if backoff is None else backoff
        self.sleep = sleep
        headers = {"Accept": "application/json", "User-Agent": "sparkpanel-cli/1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.client = httpx.Client(
            base_url=url + API_PREFIX,
            headers=headers,
            timeout=REQUEST_TIMEOUT_S,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self.client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict | None = None,
        body: Any = None,
        headers: dict | None = None,
    ) -> httpx.Response:
        safe_to_repeat = method == "GET" or bool(headers and headers.get("Idempotency-Key"))
        attempt = 0
        while True:
            try:
                response = self.client.request(
                    method, path, params=params, json=body, headers=headers
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure: Exception | httpx.Response = exc
            except (httpx.ReadTimeout, httpx.ReadError, httpx.RemoteProtocolError) as exc:
                if not safe_to_repeat:
                    raise self._unreachable(exc, sent=True) from None
                failure = exc
            except httpx.HTTPError as exc:
                raise self._unreachable(exc, sent=False) from None
            else:
                retry = response.status_code in RETRY_STATUSES or (
                    response.status_code == 409
                    and _error_code(response) == "idempotency_in_progress"
                )
                if not retry or (response.status_code != 503 and not safe_to_repeat):
                    return self._check(response)
                failure = response
            if attempt >= len(self.backoff):
                if isinstance(failure, httpx.Response):
                    return self._check(failure)
                raise self._unreachable(failure, sent=False)
            self.sleep(self.backoff[attempt])
            attempt += 1

    def _unreachable(self, exc: Exception, *, sent: bool) -> CliError:
        reason = str(exc) or type(exc).__name__
        if sent:
            return CliError(
                f"lost the connection to the panel at {self.url} ({reason}); the request may "
                "have been handled: check with `sparkpanel status`",
                EXIT_UNREACHABLE,
            )
        tries = len(self.backoff) + 1
        return CliError(
            f"could not reach the panel at {self.url} ({reason}; tried {tries} times). "
            "Check --url / SPARKPANEL_URL.",
            EXIT_UNREACHABLE,
        )

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.is_success:
            return response
        raise api_error(response, self.url)

    def get(self, path: str, **params) -> Any:
        return self.json(self.request("GET", path, params=params or None))

    def json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise CliError(
                f"the answer from {response.request.url} is not JSON: is {self.url} a SparkPanel?",
                EXIT_API_ERROR,
            ) from None

    def get_text(self, path: str, **params) -> str:
        return self.request("GET", path, params=params or None).text

    def post(self, path: str, body: Any = None, headers: dict | None = None) -> httpx.Response:
        return self.request("POST", path, body={} if body is None else body, headers=headers)


def _error_code(response: httpx.Response) -> str | None:
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def api_error(response: httpx.Response, url: str) -> CliError:
    """The panel's {"error": {code, message, fields}} as a CliError (exit 4), with how to fix
    a token problem."""
    status = response.status_code
    try:
        error = response.json()["error"]
        message = str(error.get("message") or f"HTTP {status}")
        fields = error.get("fields") or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        if 300 <= status < 400:
            where = response.headers.get("Location", "")
            message = f"HTTP {status} redirect to {where!r}: is {url} a SparkPanel?"
        else:
            snippet = " ".join(response.text.split())[:200]
            message = f"HTTP {status} from {response.request.url}" + (
                f": {snippet}" if snippet else ""
            )
        fields = {}
    details = []
    for name, messages in fields.items():
        for text in messages if isinstance(messages, list) else [messages]:
            details.append(f"  {name}: {text}")
    profile = url + PROFILE_PATH
    if status == 401:
        details.append(
            f"Create a personal API token on your profile page ({profile}) and pass it with "
            "--token or SPARKPANEL_TOKEN (or SPARKPANEL_TOKEN_FILE)."
        )
    elif status == 403:
        details.append(
            "A token acts with its owner's role: ask an admin for a role that allows this, or "
            f"create a token as a user who has one (profile page: {profile})."
        )
    return CliError(message, EXIT_API_ERROR, details)


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if url.endswith(API_PREFIX):
        url = url[: -len(API_PREFIX)]
    if "://" not in url:
        url = "http://" + url
    return url


def resolve_token(args: argparse.Namespace, environ: dict[str, str]) -> str | None:
    """--token, else --token-file, else SPARKPANEL_TOKEN, else SPARKPANEL_TOKEN_FILE."""
    token = getattr(args, "token", None) or ""
    path = "" if token else getattr(args, "token_file", None) or ""
    if not token and not path:
        token = environ.get("SPARKPANEL_TOKEN", "")
        path = "" if token else environ.get("SPARKPANEL_TOKEN_FILE", "")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                token = handle.read()
        except OSError as exc:
            raise CliError(
                f"cannot read the token file {path}: {exc.strerror}", EXIT_USAGE
            ) from None
    return token.strip() or None


# --- formatting ---------------------------------------------------------------------------
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


# --- compare and the regression check (pure, tested on canned dicts) ----------------------
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


# --- commands -----------------------------------------------------------------------------
@dataclass
class Io:
    out: TextIO
    err: TextIO

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        print(text, file=self.err, flush=True)


def cmd_whoami(panel: Panel, args, io: Io) -> int:
    me = panel.get("/me")
    if args.json:
        io.say(json.dumps(me, indent=2))
        return EXIT_OK
    io.say(f"{me['username']} ({me.get('role') or 'no role'}) at {panel.url}")
    if me.get("permissions"):
        io.say("can: " + ", ".join(me["permissions"]))
    return EXIT_OK


def cmd_queue(panel: Panel, args, io: Io) -> int:
    key = args.idempotency_key or str(uuid.uuid4())
    body = {"recipe": args.recipe, "host": args.host, "suite": args.suite, "note": args.note}
    response = panel.post("/jobs", body, headers={"Idempotency-Key": key})
    job = panel.json(response)
    if args.json:
        io.say(json.dumps(job, indent=2))
    else:
        io.say(str(job["id"]))
    if response.status_code == 200:  # a replay: this key already queued it
        io.note(f"{progress_text(job)} (already queued with this Idempotency-Key, not again)")
    else:
        io.note(progress_text(job))
    if not args.wait:
        return EXIT_OK
    return wait_for_job(panel, job["id"], timeout=args.timeout, interval=args.interval, io=io)


def cmd_status(panel: Panel, args, io: Io) -> int:
    if args.job_id is not None:
        job = panel.get(f"/jobs/{args.job_id}")
        io.say(json.dumps(job, indent=2) if args.json else "\n".join(job_lines(job)))
        return EXIT_OK
    params: dict[str, Any] = {"active": "true", "limit": 200}
    if args.host:
        params["host"] = args.host
    page = panel.get("/jobs", **params)
    jobs = page.get("items", [])
    if args.json:
        io.say(json.dumps(jobs, indent=2))
        return EXIT_OK
    if not jobs:
        io.say("No active jobs.")
        return EXIT_OK
    rows = []
    for job in sorted(jobs, key=lambda j: j["id"]):
        percent = percent_of(job)
        progress = job.get("progress") or {}
        rows.append(
            [
                str(job["id"]),
                job["state"],
                job["host"],
                job["recipe"],
                job["suite"],
                "" if percent is None else f"{percent:.0f} %",
                progress.get("step") or "",
            ]
        )
    io.say(table(rows, ["id", "state", "host", "recipe", "suite", "done", "step"]))
    if page.get("next_offset") is not None:
        io.say(f"… and {page['count'] - len(jobs)} more")
    return EXIT_OK


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


def wait_for_job(
    panel: Panel,
    job_id: int,
    *,
    timeout: float | None,
    interval: float,
    io: Io,
    display: ProgressDisplay | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    display = display or ProgressDisplay(io.err)
    deadline = clock() + timeout if timeout else None
    try:
        while True:
            job = panel.get(f"/jobs/{job_id}")
            display.update(job)
            if job["state"] not in ACTIVE_STATES:
                break
            if deadline is not None and clock() >= deadline:
                display.end()
                io.note(
                    f"timed out after {duration(timeout)}: job {job_id} is still {job['state']} "
                    f"(it keeps going; `sparkpanel cancel {job_id}` stops it)"
                )
                return EXIT_TIMEOUT
            pause = interval if deadline is None else min(interval, max(0.0, deadline - clock()))
            sleep(max(pause, 0.05))
    finally:
        display.end()
    state = job["state"]
    took = f" in {duration(job['duration_s'])}" if job.get("duration_s") is not None else ""
    if state == "done":
        io.note(f"job {job_id} done{took}")
        capacity = (job.get("summary") or {}).get("capacity_text")
        if capacity:
            io.note(capacity)
        return EXIT_OK
    io.note(f"job {job_id} {state}{took}" + (f": {job['error']}" if job.get("error") else ""))
    return EXIT_JOB_FAILED


def cmd_wait(panel: Panel, args, io: Io) -> int:
    code = wait_for_job(panel, args.job_id, timeout=args.timeout, interval=args.interval, io=io)
    if args.json:
        io.say(json.dumps(panel.get(f"/jobs/{args.job_id}"), indent=2))
    return code


def cmd_cancel(panel: Panel, args, io: Io) -> int:
    job = panel.json(panel.post(f"/jobs/{args.job_id}/cancel"))
    io.say(f"job {job['id']}: {job['state']}")
    return EXIT_OK


def _write(text: str, path: str | None, io: Io) -> None:
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


def cmd_results(panel: Panel, args, io: Io) -> int:
    if args.format == "csv":
        text = panel.get_text(f"/jobs/{args.job_id}/results.csv")
    else:
        data = panel.get(f"/jobs/{args.job_id}/results")
        if data.get("state") in ACTIVE_STATES:
            io.note(f"note: job {args.job_id} is still {data['state']}: partial results")
        text = json.dumps(data, indent=2)
    _write(text, args.output, io)
    return EXIT_OK


def cmd_compare(panel: Panel, args, io: Io) -> int:
    ids = ",".join(str(i) for i in args.job_ids)
    jobs = panel.get("/jobs/compare", ids=ids, format="json")["jobs"]
    if args.format == "json":
        _write(json.dumps({"jobs": jobs}, indent=2), args.output, io)
    elif args.format == "csv":
        _write(panel.get_text("/jobs/compare", ids=ids, format="csv"), args.output, io)
    else:
        text = compare_table(jobs) + "\n\n" + "\n".join(compare_context(jobs))
        _write(text, args.output, io)
    for job in jobs:
        if job.get("state") != "done":
            io.note(f"note: job {job.get('job')} is {job.get('state')}, not done")
    if args.max_decode_drop is None:
        return EXIT_OK
    check = decode_check(jobs, args.max_decode_drop)
    limit = f"{args.max_decode_drop:g} %"
    if check.ok:
        io.note(
            f"decode check passed: no median decode tok/s dropped more than {limit} "
            f"({check.compared} shared level{'s' if check.compared != 1 else ''} compared)"
        )
        return EXIT_OK
    for job in check.nothing_shared:
        io.note(
            f"decode check failed: job {job} shares no measured level with the baseline job "
            f"{jobs[0].get('job')}; nothing to compare"
        )
    if check.drops:
        io.note(
            f"decode check failed: median decode tok/s dropped more than {limit} "
            f"against the baseline job {jobs[0].get('job')}:"
        )
        for drop in check.drops:
            io.note(f"  {drop}")
    return EXIT_REGRESSION


# --- argument parsing ---------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


def _positive(text: str) -> float:
    value = _non_negative(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return value


def _job_id(text: str) -> int:
    if not text.isdigit() or len(text) > 12:
        raise argparse.ArgumentTypeError(f"not a job id: {text!r}")
    return int(text)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    # The connection options work before or after the command (`sparkpanel --url U status`
    # and `sparkpanel status --url U`); SUPPRESS keeps a sub-command from resetting them.
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection")
    group.add_argument(
        "--url", default=argparse.SUPPRESS, help=f"the panel (SPARKPANEL_URL; {DEFAULT_URL})"
    )
    group.add_argument("--token", default=argparse.SUPPRESS, help="API token (SPARKPANEL_TOKEN)")
    group.add_argument(
        "--token-file",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="read the token from a file (SPARKPANEL_TOKEN_FILE)",
    )

    parser = _Parser(
        prog=prog or "sparkpanel",
        description="Queue benchmark jobs on a SparkPanel, follow them, fetch and compare\n"
        "their results (a client of the panel's JSON API, /api/v1/).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def command(name: str, help_text: str, **kwargs) -> argparse.ArgumentParser:
        return commands.add_parser(
            name, help=help_text, description=help_text, parents=[common], **kwargs
        )

    def wait_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--timeout",
            type=_non_negative,
            default=0,
            metavar="SECONDS",
            help="give up after this long (exit 2; the job keeps going); 0 = no limit",
        )
        p.add_argument(
            "--interval",
            type=_positive,
            default=2.0,
            metavar="SECONDS",
            help="how often to ask the panel (default 2)",
        )

    p = command("whoami", "the token's user, role and permissions")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.set_defaults(func=cmd_whoami)

    p = command(
        "queue",
        "queue a benchmark job; prints its id on stdout (details on stderr)",
        epilog="exit codes with --wait: as `wait` (0 done, 1 failed/cancelled, 2 timed out)",
    )
    p.add_argument("--recipe", required=True, metavar="SLUG", help="the recipe's slug")
    p.add_argument("--host", required=True, metavar="NAME", help="the host's name")
    p.add_argument(
        "--suite", default=None, metavar="NAME", help="suite name or id (default: the default)"
    )
    p.add_argument("--note", default="", metavar="TEXT", help="why, e.g. 'nightly'")
    p.add_argument(
        "--idempotency-key",
        default=None,
        metavar="KEY",
        help="the same key queues once (a rerun of a CI step gets the same job back); "
        "default: a new random key, so the CLI's own retries never queue twice",
    )
    p.add_argument("--wait", action="store_true", help="then wait for it, as `wait` does")
    wait_options(p)
    p.add_argument("--json", action="store_true", help="print the job's JSON instead of its id")
    p.set_defaults(func=cmd_queue)

    p = command("status", "one job, or without JOB_ID the active jobs")
    p.add_argument("job_id", nargs="?", type=_job_id, metavar="JOB_ID")
    p.add_argument("--host", default=None, metavar="NAME", help="only this host's active jobs")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.set_defaults(func=cmd_status)

    p = command(
        "wait",
        "wait for a job to finish, with a progress bar on stderr",
        epilog="exit codes: 0 done, 1 failed, interrupted or cancelled, 2 timed out",
    )
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID")
    wait_options(p)
    p.add_argument("--json", action="store_true", help="print the finished job's JSON")
    p.set_defaults(func=cmd_wait)

    p = command("cancel", "cancel a queued or running job (it keeps what it measured)")
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID")
    p.set_defaults(func=cmd_cancel)

    p = command("results", "a job's results: JSON (default) or CSV, one row per level")
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID")
    p.add_argument("--format", choices=["json", "csv"], default="json")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(func=cmd_results)

    p = command(
        "compare",
        "compare 2–6 jobs; the first is the baseline",
        epilog="--max-decode-drop 5: exit 3 when, on any level both measured (same kind, "
        "input_len, output_len, max_concurrency), a job's median decode tok/s is more than 5 % "
        "below the baseline's, or when a job shares no measured level with it. Levels too "
        "short to time (decode_timed: false) are not compared.",
    )
    p.add_argument("job_ids", nargs="+", type=_job_id, metavar="JOB_ID")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument(
        "--max-decode-drop",
        type=_non_negative,
        default=None,
        metavar="PERCENT",
        help="fail (exit 3) if any median decode tok/s dropped more than PERCENT %% against "
        "the baseline",
    )
    p.set_defaults(func=cmd_compare)
    return parser


def main(
    argv: list[str] | None = None,
    *,
    prog: str | None = None,
    transport: httpx.BaseTransport | None = None,
    environ: dict[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the command line; returns the exit code (see EPILOG)."""
    environ = dict(os.environ) if environ is None else environ
    io = Io(stdout or sys.stdout, stderr or sys.stderr)
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (64)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command == "compare" and len(args.job_ids) < 2:
        print(f"{parser.prog} compare: error: give at least two job ids", file=io.err)
        return EXIT_USAGE
    panel = None
    try:
        url = normalise_url(
            getattr(args, "url", None) or environ.get("SPARKPANEL_URL") or DEFAULT_URL
        )
        token = resolve_token(args, environ)
        if token is None:
            raise CliError(
                "no API token",
                EXIT_API_ERROR,
                [
                    f"Create one on your profile page ({url}{PROFILE_PATH}) and pass it with "
                    "--token or SPARKPANEL_TOKEN (or SPARKPANEL_TOKEN_FILE)."
                ],
            )
        panel = Panel(url, token, transport=transport)
        return args.func(panel, args, io)
    except CliError as exc:
        print(f"error: {exc.message}", file=io.err)
        for line in exc.details:
            print(line, file=io.err)
        return exc.code
    except KeyboardInterrupt:
        print("\ninterrupted", file=io.err)
        return 130
    finally:
        if panel is not None:
            panel.close()


if __name__ == "__main__":
    sys.exit(main())

"""The command line's arguments (argparse): the connection options, one small function per
command, and `--help`'s epilog (configuration, exit codes, a nightly CI example)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from sparkcli import commands as run
from sparkcli.client import DEFAULT_URL, EXIT_USAGE, PROFILE_PATH

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


AddCommand = Callable[..., argparse.ArgumentParser]


def connection_options() -> argparse.ArgumentParser:
    """--url, --token and --token-file, a parent of the top parser and of every command.

    They work before or after the command (`sparkpanel --url U status` and
    `sparkpanel status --url U`); SUPPRESS keeps a sub-command from resetting them."""
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
    return common


def wait_options(p: argparse.ArgumentParser) -> None:
    """`wait`'s --timeout and --interval (also on `queue`, for `queue --wait`)."""
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


def add_whoami(command: AddCommand) -> None:
    p = command("whoami", "the token's user, role and permissions")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.set_defaults(func=run.cmd_whoami)


def add_queue(command: AddCommand) -> None:
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
    p.set_defaults(func=run.cmd_queue)


def add_status(command: AddCommand) -> None:
    p = command("status", "one job, or without JOB_ID the active jobs")
    p.add_argument("job_id", nargs="?", type=_job_id, metavar="JOB_ID")
    p.add_argument("--host", default=None, metavar="NAME", help="only this host's active jobs")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.set_defaults(func=run.cmd_status)


def add_wait(command: AddCommand) -> None:
    p = command(
        "wait",
        "wait for a job to finish, with a progress bar on stderr",
        epilog="exit codes: 0 done, 1 failed, interrupted or cancelled, 2 timed out",
    )
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID")
    wait_options(p)
    p.add_argument("--json", action="store_true", help="print the finished job's JSON")
    p.set_defaults(func=run.cmd_wait)


def add_cancel(command: AddCommand) -> None:
    p = command("cancel", "cancel a queued or running job (it keeps what it measured)")
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID")
    p.set_defaults(func=run.cmd_cancel)


def add_results(command: AddCommand) -> None:
    p = command("results", "a job's results: JSON (default) or CSV, one row per level")
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID")
    p.add_argument("--format", choices=["json", "csv"], default="json")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(func=run.cmd_results)


def add_compare(command: AddCommand) -> None:
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
    p.set_defaults(func=run.cmd_compare)


# The commands in the order --help lists them.
COMMANDS = (add_whoami, add_queue, add_status, add_wait, add_cancel, add_results, add_compare)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    common = connection_options()
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

    for add in COMMANDS:
        add(command)
    return parser

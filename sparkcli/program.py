"""`main`: parse the command line, find the panel and the token, run the command, and turn
its errors into a message on stderr and an exit code."""

from __future__ import annotations

import os
import sys
from typing import TextIO

import httpx

from sparkcli.client import (
    DEFAULT_URL,
    EXIT_API_ERROR,
    EXIT_USAGE,
    PROFILE_PATH,
    CliError,
    Panel,
    normalise_url,
    resolve_token,
)
from sparkcli.parser import build_parser
from sparkcli.render import Io


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

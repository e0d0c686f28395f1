"""`manage.py spark …`: the SparkPanel command line (sparkcli/) on the panel machine.

Everything after `spark` goes to the CLI as it is: `manage.py spark --help`,
`manage.py spark queue --recipe … --host …`. It talks to the panel over its API like any
other client (SPARKPANEL_URL, default http://127.0.0.1:8000, and SPARKPANEL_TOKEN).
"""

import argparse
import logging
import os
import sys

from django.core.management.base import BaseCommand, CommandError

from sparkcli import main


class Command(BaseCommand):
    help = (
        "The SparkPanel command line (queue, status, wait, results, compare …), a client of "
        "the JSON API: `manage.py spark --help`."
    )

    def run_from_argv(self, argv):
        # Bypass Django's own option parsing so that `--help`, `--url` and the rest reach
        # the CLI, and its exit codes (2 timed out, 3 regression, …) reach the shell.
        prog = f"{os.path.basename(argv[0])} {argv[1]}"
        if argv[2:3] == ["plan"]:  # runs here, without the API (apps/api/plan_cli.py)
            from apps.api.plan_cli import main as plan_main

            sys.exit(plan_main(argv[3:], prog=prog))
        logging.getLogger("httpx").setLevel(logging.WARNING)  # no per-request log lines
        sys.exit(main(argv[2:], prog=prog))

    def add_arguments(self, parser):
        parser.add_argument("cli_args", nargs=argparse.REMAINDER, help="the CLI's arguments")

    def handle(self, *args, cli_args, **options):
        # call_command("spark", "status") lands here.
        code = main([*args, *cli_args], prog="manage.py spark")
        if code:
            raise CommandError(f"sparkpanel exited with {code}", returncode=code)

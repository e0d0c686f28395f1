"""`manage.py waitworkers --host local-sim --host local-sim-2`: wait until a Celery worker
consumes each host's queue (and the default one). tools/devrun.py runs it so that `make run`
prints its last lines — the URL and the password — once everything answers."""

import time

from django.core.management.base import BaseCommand, CommandError

from apps.core.queues import host_queue
from apps.core.selectors import workers_state

DEFAULT_QUEUE = "default"


class Command(BaseCommand):
    help = "Wait until a worker consumes the default queue and each named host's queue."

    def add_arguments(self, parser):
        parser.add_argument("--host", action="append", default=[], dest="hosts")
        parser.add_argument("--timeout", type=float, default=60.0)

    def handle(self, *args, hosts, timeout, **options):
        if not 0 < timeout <= 600:
            raise CommandError("--timeout: give seconds between 0 and 600")
        wanted = {DEFAULT_QUEUE, *(host_queue(name) for name in hosts)}
        deadline = time.monotonic() + timeout
        missing = wanted
        while time.monotonic() < deadline:
            consumed = {q for queues in workers_state(timeout=1.0).values() for q in queues}
            missing = wanted - consumed
            if not missing:
                return
            time.sleep(0.5)
        raise CommandError(f"no worker consumes {', '.join(sorted(missing))} after {timeout:g} s")

"""`manage.py hostagent --host NAME`: the telemetry agent and memory watchdog of one Spark."""

import logging
import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from apps.guard.agent import (
    MEM_INTERVAL_S,
    SCRAPE_INTERVAL_S,
    STARTING_MEM_INTERVAL_S,
    HostAgent,
)
from apps.hosts.models import Host

# Its start and stop are logged, not printed: `make run`'s quiet console (LOG_LEVEL=WARNING,
# tools/devrun.py) leaves them out, VERBOSE=1 and a Spark's own service log keep them.
log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Watch one host: memory (and the watchdog), the active run's metrics, live samples."

    def add_arguments(self, parser):
        parser.add_argument("--host", required=True, help="the host's name in the panel")
        parser.add_argument(
            "--wait", action="store_true", help="wait for the host to be added instead of failing"
        )
        parser.add_argument(
            "--memory-interval",
            type=float,
            default=MEM_INTERVAL_S,
            help="seconds between memory polls (default %(default)s)",
        )
        parser.add_argument(
            "--starting-memory-interval",
            type=float,
            default=STARTING_MEM_INTERVAL_S,
            help="seconds between memory polls while a run's server starts, when vLLM's "
            "profiling can take gigabytes in a second (default %(default)s)",
        )
        parser.add_argument(
            "--no-forecast",
            action="store_true",
            help="act on readings only (two polls below the line), not on the trend",
        )
        parser.add_argument(
            "--scrape-interval",
            type=float,
            default=SCRAPE_INTERVAL_S,
            help="seconds between /metrics scrapes (default %(default)s)",
        )

    def handle(self, *args, **options):
        name = options["host"]
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        if options["wait"] and not Host.objects.filter(name=name).exists():
            log.info("waiting for a host named %r to be added…", name)
            while not stop.wait(2) and not Host.objects.filter(name=name).exists():
                pass
            if stop.is_set():
                return
        if not Host.objects.filter(name=name).exists():
            known = ", ".join(Host.objects.values_list("name", flat=True)) or "none yet"
            raise CommandError(f"no host named {name!r} (hosts: {known}); add it in Django admin")
        if (
            not 0.05 <= options["memory_interval"] <= 10
            or not 0.05 <= options["starting_memory_interval"] <= 10
            or not 0.2 <= options["scrape_interval"] <= 60
        ):
            raise CommandError(
                "memory intervals must be 0.05–10 s and the scrape interval 0.2–60 s"
            )
        agent = HostAgent(
            name,
            mem_interval=options["memory_interval"],
            starting_mem_interval=options["starting_memory_interval"],
            scrape_interval=options["scrape_interval"],
            forecast=not options["no_forecast"],
        )
        log.info("host agent for %s started (Ctrl-C stops it)", name)
        agent.run_forever(stop)
        log.info("host agent for %s stopped", name)

"""seed_demo: a fresh panel's admin account and simulated Sparks (make run, tools/devrun.py)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.roles import Role
from apps.accounts.services import user_create
from apps.hosts.models import Host
from sparkdomain.demo import DemoConfigError, demo_hosts, port_window


class Command(BaseCommand):
    help = (
        "Seed a fresh panel for a first try: an admin account (its password printed once). "
        "Safe to run again: existing data is left as it is."
    )

    def add_arguments(self, parser):
        parser.add_argument("--admin-username", default="admin")

    def handle(self, *args, admin_username, **options):
        users = get_user_model().objects
        if users.filter(username=admin_username).exists():
            self.stdout.write(
                f"Admin account {admin_username!r} already exists "
                f"(forgot the password? python manage.py changepassword {admin_username})."
            )
        else:
            _, password = user_create(username=admin_username, role=Role.ADMIN)
            bar = "=" * 64
            self.stdout.write(
                self.style.SUCCESS(
                    f"\n{bar}\n  Created the admin account (shown once, write it down):\n"
                    f"    username: {admin_username}\n    password: {password}\n{bar}\n"
                )
            )

        try:
            names = demo_hosts()
        except DemoConfigError as exc:
            raise CommandError(str(exc)) from exc
        for index, name in enumerate(names):
            # The same names tools/devrun.py gives the simulated Sparks' worker queues; each
            # its own port window (they share this machine).
            low, high = port_window(index)
            host, created = Host.objects.get_or_create(
                name=name,
                defaults={
                    "description": "This machine, simulating a DGX Spark with sparksim "
                    "(no GPU needed)",
                    "engine": Host.Engine.PROCESS,
                    "simulated": True,
                    "sim_time_scale": 10.0,
                    "sim_answers": "markdown",
                    "image_allowlist": [],
                    "port_min": low,
                    "port_max": high,
                },
            )
            if created:
                self.stdout.write(
                    f"Created the simulated Spark {host.name!r} (sparksim at 10× speed): start "
                    "a recipe on it from the Runs page."
                )

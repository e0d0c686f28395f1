"""Retiring a host and bringing it back (its page, admins: apps/hosts/views.py).

A retired host takes no new runs, benchmark jobs or on-demand loads (each door asks
`Host.retired_refusal`), and the forms do not offer it; everything it did stays — its runs,
jobs, incidents and usage rows point at it (a host with runs cannot be deleted). Each change
is one audit row, `host.retire` or `host.return`, with the acting admin.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.audit import context as audit_context
from apps.audit import services as audit
from apps.hosts.models import Host
from apps.hosts.signals import blockers


class HostRefused(Exception):
    """The change cannot be made now; the message says why and what to do."""


def host_retire(*, host: Host, user) -> Host:
    """Refused while anything is active there (the apps above say what: `blockers`). The
    host's row is locked while it is judged, as a start locks it for its slot
    (apps/runs/services.py::_slot), so a start and a retire never both pass."""
    with transaction.atomic():
        host = Host.objects.select_for_update().get(pk=host.pk)
        if host.retired:
            raise HostRefused(f"{host.name} is already retired.")
        reasons = blockers(host)
        if reasons:
            raise HostRefused(
                f"{host.name} cannot be retired while it has work: {'; '.join(reasons)}. "
                "Retire it once nothing runs or waits there."
            )
        with audit_context.quiet():  # one row that says "retire", not a field edit
            host.retired_at, host.retired_by = timezone.now(), user
            host.save(update_fields=["retired_at", "retired_by"])
        audit.record("host.retire", host, user=user,
                     after={"retired_at": host.retired_at.isoformat()},
                     message="retired: no new runs, benchmark jobs or loads; its history "
                     "stays")  # fmt: skip
    return host


def host_return(*, host: Host, user) -> Host:
    """Back in service: offered by the forms and admitted again."""
    with transaction.atomic():
        host = Host.objects.select_for_update().get(pk=host.pk)
        if not host.retired:
            raise HostRefused(f"{host.name} is not retired.")
        since = host.retired_at
        with audit_context.quiet():
            host.retired_at, host.retired_by = None, None
            host.save(update_fields=["retired_at", "retired_by"])
        audit.record("host.return", host, user=user, before={"retired_at": since.isoformat()},
                     after={"retired_at": None},
                     message="brought back into service: starts, jobs and loads may name it "
                     "again")  # fmt: skip
    return host

"""What the hosts app asks the apps above it (a provider signal: hosts never imports runs or
benchmarks; apps/core/hooks.py). Receivers are connected in their apps'
``AppConfig.ready()`` with a ``dispatch_uid``; none may raise.

``retire_blockers(sender=Host, host=host)``: what keeps the host from being retired now.
Each receiver returns a list of sentences, each naming one thing and what to do about it:
the runs app the runs active there (a pair run counts on both of its Sparks), the
benchmarks app the jobs queued or running there.
"""

from __future__ import annotations

from django.dispatch import Signal

from apps.core.hooks import gathered

retire_blockers = Signal()


def blockers(host) -> list[str]:
    """Every receiver's reasons, in the order they were connected (see ``retire_blockers``)."""
    return gathered(retire_blockers, sender=type(host), host=host)

"""Provider signals: a lower app asks the apps above it and each receiver answers a list
(apps/recipes/signals.py, apps/runs/signals.py say what each signal asks)."""

from __future__ import annotations

from django.dispatch import Signal


def gathered(signal: Signal, *, sender, **kwargs) -> list:
    """Every receiver's list answer, one after another in the order they were connected
    (a receiver that answers None adds nothing)."""
    out: list = []
    for _receiver, answer in signal.send(sender=sender, **kwargs):
        out.extend(answer or [])
    return out

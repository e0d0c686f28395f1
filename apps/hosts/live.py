"""What the live elements keyed by a host's name need from this app (the elements
themselves live with what they show: apps/runs/live.py, apps/benchmarks/live.py)."""

from __future__ import annotations

from django.http import Http404

from apps.hosts.models import Host


def host_or_404(key: str) -> Host:
    """The host a live element's key names (Http404: the page's element is gone)."""
    try:
        return Host.objects.get(name=key)
    except Host.DoesNotExist:
        raise Http404("no such host") from None

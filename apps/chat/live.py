"""The conversation page's line about its run ("run 7 on spark-1 (ready)"), a live element
(apps/core/live.py): pushed on every state change of the run, so an open chat page never
says "ready" about a run an operator, the watchdog or an idle unload has stopped.
static/js/chat.js reads the element's data-state to turn Send off (or show the on-demand
load panel). Public (no per-user controls): any panel user may see a run's state."""

from __future__ import annotations

from django.http import Http404

from apps.core import live
from apps.core.live import Element
from apps.runs.models import Run


def _run_context(key: str, request) -> dict:
    try:
        return {"run": Run.objects.select_related("host").get(pk=int(key))}
    except (ValueError, Run.DoesNotExist):
        raise Http404("no such run") from None


live.register(
    "chat-run", Element(lambda k: f"chat-run-{k}", "chat/partials/run_state.html", _run_context)
)


def on_run_state_changed(sender, run_id: int, state: str = "", **kwargs) -> None:
    """Receiver of apps.runs.signals.run_state_changed (sent once the change is
    committed). Never raises: live.push logs and drops what it cannot push."""
    live.push([("chat-run", str(run_id))])

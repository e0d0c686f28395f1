from django.apps import AppConfig

from apps.runs.signals import run_state_changed, stop_impact


class ChatConfig(AppConfig):
    name = "apps.chat"
    label = "chat"
    verbose_name = "Chat"

    def ready(self) -> None:
        # The conversation page's live run line (models are loaded now).
        from apps.chat import live

        # The runs app asks who is chatting before a stop (apps/runs/signals.py), and
        # tells every state change: open chat pages follow their run's.
        stop_impact.connect(_stop_impact, dispatch_uid="chat.stop_impact")
        run_state_changed.connect(live.on_run_state_changed, dispatch_uid="chat.run_state")


def _stop_impact(sender, run, now, **kwargs) -> dict:
    # Imported here: apps.py loads before the models are ready.
    from apps.chat.selectors import chatting_on

    return chatting_on(run, now)

from django.apps import AppConfig

from apps.runs.signals import stop_impact


class ChatConfig(AppConfig):
    name = "apps.chat"
    label = "chat"
    verbose_name = "Chat"

    def ready(self) -> None:
        # The runs app asks who is chatting before a stop (apps/runs/signals.py).
        stop_impact.connect(_stop_impact, dispatch_uid="chat.stop_impact")


def _stop_impact(sender, run, now, **kwargs) -> dict:
    # Imported here: apps.py loads before the models are ready.
    from apps.chat.selectors import chatting_on

    return chatting_on(run, now)

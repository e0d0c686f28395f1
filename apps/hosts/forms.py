"""The host a form asks for: only hosts in service are offered, each marked when no worker
consumes its queue."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from apps.hosts.models import Host


class HostChoiceField(forms.ModelChoiceField):
    """Offers the hosts in service, an offline one marked in its option ("spark-2 (offline:
    no worker seen for 12 min)"; still selectable: the run or job waits in the host's queue
    until a worker consumes it). A retired host that is posted anyway is not refused here
    as "not one of the choices": it reaches the service, which refuses it in the words the
    API uses (`Host.retired_refusal`) — or, with `refuse_retired`, the form does (a form
    with no service rule behind it: results imported from elsewhere)."""

    def __init__(self, *, refuse_retired: bool = False, mark_offline: bool = True, **kwargs):
        super().__init__(queryset=Host.objects.in_service(), **kwargs)
        self.refuse_retired = refuse_retired
        self.mark_offline = mark_offline

    def label_from_instance(self, obj: Host) -> str:
        offline = obj.offline_words if self.mark_offline else ""
        return f"{obj.name} ({offline})" if offline else obj.name

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            host = Host.objects.get(pk=value)
        except (ValueError, TypeError, Host.DoesNotExist):
            raise ValidationError(
                self.error_messages["invalid_choice"], code="invalid_choice",
                params={"value": value},
            ) from None  # fmt: skip
        if self.refuse_retired and host.retired:
            raise ValidationError(host.retired_refusal(), code="host_retired")
        return host

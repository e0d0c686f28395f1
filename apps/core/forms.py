from __future__ import annotations

import datetime as dt

from django import forms
from django.utils import timezone

from apps.core.models import Notice

# (value, label) of the expiry choices; the value is what the form posts.
EXPIRY_CHOICES = [
    ("never", "Until deleted"),
    ("1h", "For 1 hour"),
    ("today", "Until the end of today"),
    ("week", "For 1 week"),
]


def expiry_time(choice: str, now: dt.datetime | None = None) -> dt.datetime | None:
    """When a notice posted now with this expiry choice stops being shown (None: never).
    "Today" ends at midnight in the panel's time zone (TIME_ZONE)."""
    now = now or timezone.now()
    if choice == "1h":
        return now + dt.timedelta(hours=1)
    if choice == "today":
        local = timezone.localtime(now)
        midnight = (local + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight
    if choice == "week":
        return now + dt.timedelta(weeks=1)
    return None


class NoticeForm(forms.ModelForm):
    expires = forms.ChoiceField(
        choices=EXPIRY_CHOICES,
        initial="never",
        required=False,
        label="Show",
        error_messages={"invalid_choice": "Choose how long the notice is shown."},
    )

    class Meta:
        model = Notice
        fields = ["message", "level"]
        error_messages = {
            "message": {
                "required": "Write a message: an empty notice tells nobody anything.",
                "max_length": (
                    "A notice is at most %(limit_value)d characters (this one has "
                    "%(show_value)d): keep it short and link to the details."
                ),
            }
        }
        widgets = {
            "message": forms.TextInput(
                attrs={"placeholder": "e.g. Swapping spark-1 to the 120B recipe at 14:00"}
            )
        }

    def clean_expires(self) -> str:
        return self.cleaned_data.get("expires") or "never"

    def post_kwargs(self) -> dict:
        """What notice_post takes: message, level and the computed expiry time."""
        data = self.cleaned_data
        return {
            "message": data["message"],
            "level": data["level"],
            "expires_at": expiry_time(data["expires"]),
        }

from __future__ import annotations

import datetime as dt

from django import forms
from django.core.exceptions import ImproperlyConfigured
from django.core.validators import MaxValueValidator
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


# --- bounded numbers: every number a form takes has an upper bound from its domain ---------
MAX_NUMBER_TEXT = 40  # characters: any real value of any field, in any spelling, fits


class _BoundedNumber:
    """A number field that needs a `max_value` (TypeError without one, when the form class
    is defined) and refuses text longer than MAX_NUMBER_TEXT before converting it, so a
    5,000-digit integer or a "1e308" is a field error in the form's words, never work or
    a 500 later (a planner overflowing, a database refusing). Infinity and NaN are refused
    by Django's own FloatField/DecimalField checks."""

    def __init__(self, *args, max_value=None, **kwargs):
        if max_value is None:
            raise TypeError(
                f"{type(self).__name__} needs a max_value: every number a form takes has an "
                "upper bound from its domain."
            )
        super().__init__(*args, max_value=max_value, **kwargs)

    def to_python(self, value):
        if isinstance(value, str) and len(value.strip()) > MAX_NUMBER_TEXT:
            raise forms.ValidationError(
                "Enter a number of at most %(limit)d characters.",
                code="too_long",
                params={"limit": MAX_NUMBER_TEXT},
            )
        return super().to_python(value)


class BoundedIntegerField(_BoundedNumber, forms.IntegerField):
    pass


class BoundedFloatField(_BoundedNumber, forms.FloatField):
    pass


class BoundedDecimalField(_BoundedNumber, forms.DecimalField):
    pass


_BOUNDED = {
    forms.IntegerField: BoundedIntegerField,
    forms.FloatField: BoundedFloatField,
    forms.DecimalField: BoundedDecimalField,
}


def model_max(db_field):
    """The upper bound a model field declares itself (a MaxValueValidator it was given),
    not the database's integer range Django adds."""
    for validator in [*db_field.default_validators, *db_field._validators]:
        if isinstance(validator, MaxValueValidator):
            return validator.limit_value
    return None


def bounded_formfields(bounds: dict[str, float]):
    """A ModelForm `Meta.formfield_callback`: each number field of the model becomes a
    bounded one, its bound from `bounds` or the model field's own MaxValueValidator. A
    number field with neither is a programming error, raised when the form is defined."""

    def callback(db_field, **kwargs):
        field = db_field.formfield(**kwargs)
        bounded = _BOUNDED.get(type(field))
        if bounded is None:
            return field
        limit = bounds.get(db_field.name, model_max(db_field))
        if limit is None:
            raise ImproperlyConfigured(
                f"{db_field.model.__name__}.{db_field.name} has no upper bound: give it one "
                "in the form's number bounds."
            )
        return db_field.formfield(form_class=bounded, max_value=limit, **kwargs)

    return callback

from django.db.models import Model

from apps.api.errors import ApiError


def get_or_404(queryset, label: str, **lookup) -> Model:
    obj = queryset.filter(**lookup).first()
    if obj is None:
        value = next(iter(lookup.values()), "")
        raise ApiError(404, f"No {label} {value!r}.")
    return obj


def get_or_422(queryset, field: str, label: str, **lookup) -> Model:
    """An object named in the request body: unknown is invalid input (422, on that field),
    not a missing resource."""
    obj = queryset.filter(**lookup).first()
    if obj is None:
        value = next(iter(lookup.values()), "")
        message = f"No {label} {value!r}."
        raise ApiError(422, message, fields={field: [message]})
    return obj


def form_errors(form) -> dict[str, list[str]]:
    return {field: [str(m) for m in messages] for field, messages in form.errors.items()}

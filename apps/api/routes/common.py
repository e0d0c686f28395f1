from django.db.models import Model

from apps.api.errors import ApiError


def get_or_404(queryset, label: str, **lookup) -> Model:
    obj = queryset.filter(**lookup).first()
    if obj is None:
        value = next(iter(lookup.values()), "")
        raise ApiError(404, f"No {label} {value!r}.")
    return obj


def form_errors(form) -> dict[str, list[str]]:
    return {field: [str(m) for m in messages] for field, messages in form.errors.items()}

"""The plan box's errors in the form's words: "GPU memory utilization", not
`gpu_memory_utilization` (the live planner's form has no labels of its own; the recipe form
the user is filling in has them)."""

from __future__ import annotations


def field_label(name: str) -> str:
    from apps.recipes.forms import RecipeForm

    field = RecipeForm.base_fields.get(name)
    if field is not None and field.label:
        return str(field.label)
    if name == "__all__":
        return "This recipe"
    return name.replace("_", " ").capitalize()


def labelled_errors(errors) -> list[dict]:
    """[{"name", "label", "errors"}] for a form's errors, in the form's field order."""
    return [
        {"name": name, "label": field_label(name), "errors": list(messages)}
        for name, messages in errors.items()
    ]

"""YAML import and export of recipes (SparkPanel's own format and sparkrun recipes).

Every imported recipe goes through RecipeForm, the same validation as the browser (so
the ≤ 0.90 rule and every flag check apply), and an import is all or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

import yaml
from django.db import transaction

from apps.recipes.forms import ARCH_FIELDS, FLAG_FIELDS, IDENTITY_FIELDS, RecipeForm
from apps.recipes.launch import default_argv
from apps.recipes.models import Recipe
from apps.recipes.selectors import image_note
from sparkdomain.bounded import DocumentError, clip, load_yaml
from sparkdomain.flags import format_extra_args
from sparkdomain.sparkrun import SparkrunImportError, looks_like_sparkrun, parse_sparkrun

FORMAT_VERSION = 1
# What an import answers is bounded like what it reads: each message cut to a readable
# length, and only so many of them (the last one says how many more there were).
MESSAGE_CHARS = 500
MESSAGES_PER_KEY = 10
PROBLEMS_SHOWN = 50
NOTES_SHOWN = 50
FIELDS = [*IDENTITY_FIELDS, *FLAG_FIELDS, "extra_args", *ARCH_FIELDS]
READ_ONLY = ("argv",)


@dataclass
class EntryErrors:
    label: str
    errors: dict[str, list[str]]


@dataclass
class ImportResult:
    created: list[Recipe] = field(default_factory=list)
    updated: list[Recipe] = field(default_factory=list)
    problems: list[EntryErrors] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _problem(label: str, message: str, key: str = "__all__") -> EntryErrors:
    return EntryErrors(label, {key: [message]})


def recipe_to_dict(recipe: Recipe) -> dict:
    data: dict = {}
    for name in FIELDS:
        value = getattr(recipe, name)
        if isinstance(value, Decimal):
            value = float(value)
        if value in (None, "") and name not in IDENTITY_FIELDS[:4]:
            continue
        data[name] = value
    data["argv"] = default_argv(recipe)
    return data


def recipes_to_yaml(recipes) -> str:
    doc = {"sparkpanel": FORMAT_VERSION, "recipes": [recipe_to_dict(r) for r in recipes]}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


def _entries(doc) -> tuple[list[dict], list[str], list[EntryErrors]]:
    """The recipe mappings in a document, whatever its shape."""
    notes: list[str] = []
    if isinstance(doc, dict) and "recipes" in doc:
        extra = set(doc) - {"recipes", "sparkpanel"}
        if extra:
            keys = _keys(extra)
            message = f"unknown top-level key(s): {keys} (expected 'sparkpanel' and 'recipes')"
            return [], notes, [_problem("document", message)]
        version = doc.get("sparkpanel", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            message = f"format version {clip(version)} is not supported (this panel reads 1)"
            return [], notes, [_problem("document", message, "sparkpanel")]
        doc = doc["recipes"]
    elif isinstance(doc, dict) and looks_like_sparkrun(doc):
        label = f"sparkrun recipe {clip(repr(doc.get('model')))}"
        try:
            parsed = parse_sparkrun(doc)
        except SparkrunImportError as exc:
            return [], notes, [_problem(label, str(exc))]
        problems = [EntryErrors(label, parsed.errors)] if parsed.errors else []
        notes += [f"sparkrun: {line}" for line in parsed.ignored]
        fields = dict(parsed.fields)
        if parsed.description and "description" not in fields:
            fields["description"] = parsed.description
        return [fields], notes, problems
    elif isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list) or not all(isinstance(e, dict) for e in doc):
        message = (
            "expected a mapping with 'recipes:', a list of recipes, one recipe, "
            "or a sparkrun recipe"
        )
        return [], notes, [_problem("document", message)]
    return doc, notes, []


def _keys(keys) -> str:
    """Unknown keys named in a message: the first few, each cut short."""
    names = sorted(map(str, keys))
    more = len(names) - 10
    return ", ".join(clip(n, 60) for n in names[:10]) + (f" and {more:,} more" if more > 0 else "")


def _cut(messages: list, most: int) -> list[str]:
    shown = [clip(str(m), MESSAGE_CHARS) for m in messages[:most]]
    if len(messages) > most:
        shown.append(f"… and {len(messages) - most:,} more")
    return shown


def _bounded(result: ImportResult) -> ImportResult:
    """Cut every message and the number of them, whatever produced them (a form's own
    messages may quote what was typed)."""
    problems = result.problems
    result.problems = [
        EntryErrors(
            clip(p.label, 160),
            {
                clip(str(k), 60): _cut(list(v), MESSAGES_PER_KEY)
                for k, v in list(p.errors.items())[:PROBLEMS_SHOWN]
            },
        )
        for p in problems[:PROBLEMS_SHOWN]
    ]
    if len(problems) > PROBLEMS_SHOWN:
        more = f"… and {len(problems) - PROBLEMS_SHOWN:,} more recipes with problems"
        result.problems.append(_problem("document", more))
    result.notes = _cut(result.notes, NOTES_SHOWN)
    return result


def recipe_form_data(entry: dict) -> dict:
    """A recipe as a dict (YAML entry, API body) → RecipeForm data; absent keys = defaults."""
    data = dict(entry)
    if isinstance(data.get("extra_args"), list):
        data["extra_args"] = format_extra_args([str(t) for t in data["extra_args"]])
    for key, value in list(data.items()):
        if value is None:
            data[key] = ""
    # A key absent from the file means the model's default (a missing boolean is not
    # "unchecked", a missing max_num_seqs is not "required").
    for name in FIELDS:
        model_field = Recipe._meta.get_field(name)
        if name not in data and model_field.has_default():
            default = model_field.get_default()
            data[name] = format_extra_args(default) if name == "extra_args" else default
    return data


def recipes_from_yaml(text: str, *, replace: bool = False, user=None) -> ImportResult:
    """Validate every recipe in `text`; save all of them or none. Every message in the
    result is bounded (`_bounded`), whatever the document held."""
    return _bounded(_recipes_from_yaml(text, replace=replace, user=user))


def _recipes_from_yaml(text: str, *, replace: bool, user) -> ImportResult:
    result = ImportResult()
    try:
        # Bounded (sparkdomain/bounded.py): size, depth, aliases, text and number lengths.
        doc = load_yaml(text)
    except DocumentError as exc:
        result.problems.append(EntryErrors("document", {"__all__": [str(exc)]}))
        return result
    entries, result.notes, result.problems = _entries(doc)
    if result.problems:
        return result
    if not entries:
        result.problems.append(_problem("document", "no recipes in the document"))
        return result

    forms: list[RecipeForm] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        name = entry.get("name")
        label = f"recipe {index + 1}" + (f" ({clip(name, 60)})" if name else "")
        # argv is what an export shows (the vector for the default host), never an input.
        unknown = set(map(str, entry)) - set(FIELDS) - set(READ_ONLY)
        if unknown:
            result.problems.append(_problem(label, f"unknown key(s): {_keys(unknown)}"))
            continue
        slug = str(entry.get("slug") or "")
        instance = Recipe.objects.filter(slug=slug).first() if slug else None
        if instance is None and name and isinstance(name, str):
            instance = Recipe.objects.filter(name=name).first()
        if instance is not None and not replace:
            message = f"a recipe {instance.slug!r} already exists; tick 'replace' to overwrite it"
            result.problems.append(_problem(label, message, "slug"))
            continue
        form = RecipeForm(data=recipe_form_data(entry), instance=instance)
        if not form.is_valid():
            result.problems.append(EntryErrors(label, {k: list(v) for k, v in form.errors.items()}))
            continue
        key = form.cleaned_data.get("slug") or form.cleaned_data["name"]
        if key in seen:
            result.problems.append(_problem(label, "appears twice in this file", "slug"))
            continue
        seen.add(key)
        forms.append(form)
    if result.problems:
        return result
    with transaction.atomic():
        for form in forms:
            is_new = form.instance.pk is None
            recipe = form.save(commit=False)
            if is_new and user is not None and user.is_authenticated:
                recipe.created_by = user
            recipe.save()
            (result.created if is_new else result.updated).append(recipe)
    # A recipe keeps the image it came with (a sparkrun `container:` line), but one that no
    # host would start says so now, not at its first start (issue 38).
    # Before the other notes: the import result shows only so many (NOTES_SHOWN).
    notes = [(r.name, image_note(r.image)) for r in [*result.created, *result.updated]]
    result.notes[:0] = [f"{name}: {note}" for name, note in notes if note]
    return result

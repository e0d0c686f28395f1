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
from sparkdomain.command import serve_argv
from sparkdomain.flags import format_extra_args
from sparkdomain.model_refs import recipe_folders_problem
from sparkdomain.sparkrun import SparkrunImportError, looks_like_sparkrun, parse_sparkrun
from sparkdomain.sparkrun.export import sparkrun_yaml, to_sparkrun

FORMAT_VERSION = 1
# What an import answers is bounded like what it reads: each message cut to a readable
# length, and only so many of them (the last one says how many more there were).
MESSAGE_CHARS = 500
MESSAGES_PER_KEY = 10
PROBLEMS_SHOWN = 50
NOTES_SHOWN = 50
FIELDS = [*IDENTITY_FIELDS, *FLAG_FIELDS, "extra_args", "env", *ARCH_FIELDS]
# Kept with a recipe but not edited in the form: the code it asks for (sparkrun mods,
# patches, commands around vLLM: a start refuses them unless the host allows them) and
# where it came from.
KEPT = ("mods", "folders", "source")
READ_ONLY = ("argv",)


@dataclass
class EntryErrors:
    label: str
    errors: dict[str, list[str]]


@dataclass
class Entry:
    """One recipe to import: its fields, and whether it may be left out when invalid (a
    sparkrun variant: the base recipe imports, the variant's problems become notes)."""

    fields: dict
    optional: bool = False


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
    for name in [*FIELDS, *KEPT]:
        value = getattr(recipe, name)
        if isinstance(value, Decimal):
            value = float(value)
        if value in (None, "", [], {}) and name not in IDENTITY_FIELDS[:4]:
            continue
        data[name] = value
    data["argv"] = default_argv(recipe)
    return data


def recipe_to_sparkrun_yaml(recipe: Recipe) -> str:
    """One recipe as a sparkrun recipe (sparkdomain/sparkrun/export.py): its exact vector in
    `command:`, which sparkrun renders back into the command the panel runs."""
    return sparkrun_yaml(to_sparkrun(recipe, serve_argv(recipe)))


def recipes_to_yaml(recipes) -> str:
    doc = {"sparkpanel": FORMAT_VERSION, "recipes": [recipe_to_dict(r) for r in recipes]}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


def _entries(
    doc, name_hint: str = "", provenance: dict | None = None
) -> tuple[list[Entry], list[str], list[EntryErrors]]:
    """The recipe mappings in a document, whatever its shape. `name_hint` and `provenance`
    (registry, path, commit) are a sparkrun recipe's file name and origin."""
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
            parsed = parse_sparkrun(doc, name_hint=name_hint)
        except SparkrunImportError as exc:
            return [], notes, [_problem(label, str(exc))]
        problems = [EntryErrors(label, parsed.errors)] if parsed.errors else []
        notes += [f"sparkrun: {line}" for line in parsed.ignored]
        entries = [Entry(_sparkrun_fields(parsed, provenance))]
        for variant, result in parsed.variants:
            if result.errors:
                shown = "; ".join(result.error_messages()[:3])
                notes.append(f"sparkrun: variant {clip(variant, 40)} not imported: {shown}")
                continue
            entries.append(
                Entry(_sparkrun_fields(result, {**(provenance or {}), "variant": variant}), True)
            )
        return entries, notes, problems
    elif isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list) or not all(isinstance(e, dict) for e in doc):
        message = (
            "expected a mapping with 'recipes:', a list of recipes, one recipe, "
            "or a sparkrun recipe"
        )
        return [], notes, [_problem("document", message)]
    return [Entry(e) for e in doc], notes, []


def _sparkrun_fields(parsed, provenance: dict | None = None) -> dict:
    fields = dict(parsed.fields)
    if provenance:
        fields["source"] = {**fields.get("source", {}), **provenance}
    if parsed.description and "description" not in fields:
        fields["description"] = parsed.description
    return fields


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
    data = {k: v for k, v in entry.items() if k not in KEPT}
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
    if data.get("max_model_len") == -1:
        data["max_model_len"] = "auto"
    return data


def kept_problems(entry: dict) -> dict[str, list[str]]:
    """What is wrong with the kept keys of an entry (mods, folders, source)."""
    errors: dict[str, list[str]] = {}
    mods = entry.get("mods", [])
    if not isinstance(mods, list) or len(mods) > 64 or not all(
        isinstance(m, dict) and isinstance(m.get("kind"), str)
        and set(m) <= {"kind", "name", "text"}
        and all(isinstance(v, str) and len(v) <= 2000 for v in m.values())
        for m in mods
    ):  # fmt: skip
        errors["mods"] = ["a list of at most 64 {kind, name or text} entries"]
    problem = recipe_folders_problem(entry.get("folders", []))
    if problem:
        errors["folders"] = [problem]
    if not isinstance(entry.get("source", {}), dict):
        errors["source"] = ["a mapping"]
    return errors


def recipes_from_yaml(
    text: str, *, replace: bool = False, user=None, name_hint: str = "",
    provenance: dict | None = None,
) -> ImportResult:  # fmt: skip
    """Validate every recipe in `text`; save all of them or none. Every message in the
    result is bounded (`_bounded`), whatever the document held."""
    return _bounded(
        _recipes_from_yaml(
            text, replace=replace, user=user, name_hint=name_hint, provenance=provenance
        )
    )


def _recipes_from_yaml(
    text: str, *, replace: bool, user, name_hint: str = "", provenance: dict | None = None
) -> ImportResult:
    result = ImportResult()
    try:
        # Bounded (sparkdomain/bounded.py): size, depth, aliases, text and number lengths.
        doc = load_yaml(text)
    except DocumentError as exc:
        result.problems.append(EntryErrors("document", {"__all__": [str(exc)]}))
        return result
    entries, result.notes, result.problems = _entries(doc, name_hint, provenance)
    if result.problems:
        return result
    if not entries:
        result.problems.append(_problem("document", "no recipes in the document"))
        return result

    forms: list[tuple[RecipeForm, dict]] = []
    seen: set[str] = set()
    for index, item in enumerate(entries):
        entry = item.fields
        before = len(result.problems)
        name = entry.get("name")
        label = f"recipe {index + 1}" + (f" ({clip(name, 60)})" if name else "")
        # argv is what an export shows (the vector for the default host), never an input.
        unknown = set(map(str, entry)) - set(FIELDS) - set(READ_ONLY) - set(KEPT)
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
        kept_errors = kept_problems(entry)
        kept = {k: entry[k] for k in KEPT if k in entry} if not kept_errors else {}
        form = RecipeForm(data=recipe_form_data(entry), instance=instance, kept=kept)
        if kept_errors:
            result.problems.append(EntryErrors(label, kept_errors))
        elif not form.is_valid():
            result.problems.append(EntryErrors(label, {k: list(v) for k, v in form.errors.items()}))
        else:
            key = form.cleaned_data.get("slug") or form.cleaned_data["name"]
            if key in seen:
                result.problems.append(_problem(label, "appears twice in this file", "slug"))
            else:
                seen.add(key)
                forms.append((form, entry))
        if item.optional and len(result.problems) > before:
            # A sparkrun variant that does not import leaves a note, not a failed import.
            for problem in result.problems[before:]:
                shown = "; ".join(f"{k}: {m}" for k, ms in problem.errors.items() for m in ms[:2])
                result.notes.append(f"{problem.label}: variant not imported — {shown}")
            del result.problems[before:]
    if result.problems:
        return result
    with transaction.atomic():
        for form, entry in forms:
            is_new = form.instance.pk is None
            recipe = form.save(commit=False)
            for name in KEPT:
                if name in entry:
                    setattr(recipe, name, entry[name])
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

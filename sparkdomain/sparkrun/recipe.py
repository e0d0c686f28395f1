"""What an import yields: the recipe in SparkPanel's field names with every problem
against its key path, and the error for a document that cannot be imported at all."""

from __future__ import annotations

from dataclasses import dataclass, field


class SparkrunImportError(ValueError):
    """The document cannot be imported at all (not a vLLM recipe, no model)."""


@dataclass
class SparkrunRecipe:
    """A sparkrun recipe in SparkPanel's field names.

    `errors` maps a key path ("defaults.max_model_len") to what is wrong with it; the
    field is left out of `fields` so the form shows it empty rather than wrong.
    `ignored` says, one sentence each, which accepted keys were deliberately not used.
    """

    fields: dict[str, object] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    description: str = ""
    # A community `variants:` block: each variant as a recipe of its own (name, recipe).
    variants: list[tuple[str, SparkrunRecipe]] = field(default_factory=list)

    def error_messages(self) -> list[str]:
        """Every error as one "path: message" line, for a form's non-field errors."""
        return [
            f"{path}: {message}" for path, messages in self.errors.items() for message in messages
        ]

    def _error(self, path: str, message: str) -> None:
        self.errors.setdefault(path, []).append(message)

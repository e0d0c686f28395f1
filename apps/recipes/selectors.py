"""Read-only queries the recipe and run pages share."""

from __future__ import annotations

from apps.hosts.models import Host
from apps.recipes.models import Recipe


def start_form_context(selected_recipe: int | None = None) -> dict:
    """What the "start a run" form lists: every recipe and every host in service (a
    retired one takes no new runs; an offline one is marked: `Host.offline_words`), and
    every host for the Runs list's filter (a retired host's runs stay)."""
    return {
        "start_recipes": Recipe.objects.all(),
        "start_hosts": Host.objects.in_service(),
        "filter_hosts": Host.objects.all(),
        "selected_recipe": selected_recipe,
    }


def weights_on_hosts(recipe: Recipe) -> list[dict]:
    """Each host with what its cache holds of the recipe's model (its last scan), and why
    nothing would be downloaded there, for the recipe page's weights card (hosts in service:
    a retired one takes no download)."""
    rows = []
    for host in Host.objects.in_service():
        cached = host.cached_model(recipe.model_id)
        rows.append({"host": host, "cached": cached,
                     "why_not": host.weights_not_downloaded(recipe.model_id)})  # fmt: skip
    return rows


def image_note(image: str) -> str | None:
    """The note on a recipe whose image no host would start (issue 38): an import keeps the
    image, the recipe page and the import result say so, and every start is refused until
    an admin allows the image on the host (apps/hosts/models.py::Host.image_refusal)."""
    if Host.objects.image_allowed_somewhere(image):
        return None
    return (
        f"The image {image} is not allowed on any host yet; an admin must allow it (add it "
        "to a host's image allowlist) before this recipe can start."
    )

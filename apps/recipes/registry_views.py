"""Pages of the recipe registries (apps/recipes/registries.py; docs/recipes.md,
Registries): the list (an admin adds one), a registry's recipes (import one), and an
imported recipe's newer version (its diff; update or keep)."""

from __future__ import annotations

import re

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.roles import EDIT_RECIPES, MANAGE_HOSTS
from apps.recipes import registries as svc
from apps.recipes.models import Recipe, RecipeRegistry

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,59}$")


def _refused(request: HttpRequest, result) -> None:
    """An import's problems as the page's messages (nothing was imported)."""
    for problem in result.problems:
        for field, errors in problem.errors.items():
            for error in errors:
                shown = error if field == "__all__" else f"{field}: {error}"
                messages.error(request, f"{problem.label}: {shown}")


def _registry(name: str) -> RecipeRegistry:
    return get_object_or_404(RecipeRegistry, name=name)


@require_http_methods(["GET", "POST"])
def registry_list(request: HttpRequest) -> HttpResponse:
    status = 200
    if request.method == "POST":
        if not request.user.has_perm(MANAGE_HOSTS):
            raise PermissionDenied("Only an admin adds registries.")
        name = (request.POST.get("name") or "").strip()
        url = (request.POST.get("url") or "").strip()
        if not _NAME.match(name):
            messages.error(request, "Name: lowercase letters, digits and '-', at most 60.")
            status = 400
        else:
            try:
                registry = svc.registry_add(name=name, url=url, user=request.user)
            except svc.RegistryError as exc:
                messages.error(request, str(exc))
                status = 400
            else:
                if registry.error:
                    messages.error(request, f"Added, but the fetch failed: {registry.error}")
                return redirect(registry)
    return render(
        request,
        "recipes/registries.html",
        {
            "registries": RecipeRegistry.objects.all(),
            "form_values": request.POST if status == 400 else {},
        },
        status=status,
    )


@require_GET
def registry_detail(request: HttpRequest, name: str) -> HttpResponse:
    registry = _registry(name)
    problem = ""
    try:
        rows = svc.registry_recipes(registry)
    except svc.RegistryError as exc:
        rows, problem = [], str(exc)
    return render(
        request, "recipes/registry.html", {"registry": registry, "rows": rows, "problem": problem}
    )


@require_POST
@permission_required(EDIT_RECIPES, raise_exception=True)
def registry_fetch(request: HttpRequest, name: str) -> HttpResponse:
    registry = svc.registry_fetch(_registry(name))
    if registry.error:
        messages.error(request, f"The fetch failed: {registry.error}")
    else:
        messages.success(request, f"{registry.name} is at commit {registry.commit[:12]}.")
    return redirect(registry)


@require_POST
@permission_required(EDIT_RECIPES, raise_exception=True)
def registry_import(request: HttpRequest, name: str) -> HttpResponse:
    registry = _registry(name)
    path = request.POST.get("path", "")
    try:
        result = svc.registry_import(registry, path, user=request.user)
    except svc.RegistryError as exc:
        messages.error(request, str(exc))
        return redirect(registry)
    if not result.ok:
        _refused(request, result)
        return redirect(registry)
    created = [*result.created, *result.updated]
    messages.success(
        request,
        f"Imported {', '.join(r.name for r in created)} from "
        f"{registry.name} at {registry.commit[:12]}.",
    )
    for note in result.notes:
        messages.info(request, note)
    return redirect(created[0])


@require_http_methods(["GET", "POST"])
@permission_required(EDIT_RECIPES, raise_exception=True)
def registry_update(request: HttpRequest, name: str, slug: str) -> HttpResponse:
    registry = _registry(name)
    recipe = get_object_or_404(Recipe, slug=slug, source__registry=registry.name)
    if request.method == "POST":
        if request.POST.get("action") == "keep":
            svc.update_keep(registry, recipe, user=request.user)
            messages.info(request, f"Kept “{recipe.name}” as it is.")
            return redirect(registry)
        result = svc.registry_import(
            registry, recipe.source.get("path", ""), user=request.user, replace=True
        )
        if result.ok:
            messages.success(request, f"Updated “{recipe.name}” to {registry.commit[:12]}.")
            return redirect(recipe)
        _refused(request, result)
    diff = svc.update_diff(registry, recipe)
    return render(
        request,
        "recipes/registry_update.html",
        {"registry": registry, "recipe": recipe, "diff": diff},
    )

"""A host's model cache page (/hosts/<name>/models/): what is cached, the downloads under
way, rescan, cancel and delete (operators, deletion after a confirmation page); and a
recipe's "Download now" (/recipes/<slug>/download/). The work is the host's worker's."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.roles import OPERATE_RUNS
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Prefetch
from apps.runs.weights import cache_context, recipes_using
from apps.runs.weights_services import (
    CacheRefused,
    check_delete,
    request_cancel,
    request_delete,
    request_prefetch,
    request_scan,
)


@require_GET
def host_models(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    return render(request, "runs/host_models.html", cache_context(host))


@require_POST
@permission_required(OPERATE_RUNS, raise_exception=True)
def host_models_rescan(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    try:
        request_scan(host)
        messages.success(request, f"{host.name}'s worker scans its cache; the list updates.")
    except CacheRefused as exc:
        messages.error(request, str(exc))
    return redirect("host-models", host.name)


@require_http_methods(["GET", "POST"])
@permission_required(OPERATE_RUNS, raise_exception=True)
def host_models_delete(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    data = request.POST if request.method == "POST" else request.GET
    repo, commit = data.get("repo", "")[:200], data.get("commit", "")[:64]
    commits = [commit] if commit else None
    try:
        check_delete(host, repo, commits)
    except CacheRefused as exc:
        messages.error(request, str(exc))
        return redirect("host-models", host.name)
    if request.method == "POST" and data.get("confirm") == "1":
        request_delete(host=host, repo_id=repo, commits=commits)
        messages.success(request, f"Deleting {repo} from {host.name}; the list updates when done.")
        return redirect("host-models", host.name)
    cached = host.cached_model(repo) or {}
    size = next((r["size"] for r in cached.get("revisions", []) if r["commit"] == commit),
                None) if commit else cached.get("size")  # fmt: skip
    context = {"host": host, "repo": repo, "commit": commit, "size": size,
               "recipes": recipes_using([{"repo": repo}])[repo]}  # fmt: skip
    return render(request, "runs/host_models_delete.html", context)


@require_POST
@permission_required(OPERATE_RUNS, raise_exception=True)
def host_models_cancel(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    item = get_object_or_404(Prefetch, pk=pk, host__name=name)
    try:
        request_cancel(item)
        messages.success(request, f"Cancelling the download of {item.repo_id}.")
    except CacheRefused as exc:
        messages.error(request, str(exc))
    return redirect("host-models", name)


@require_POST
@permission_required(OPERATE_RUNS, raise_exception=True)
def recipe_download(request: HttpRequest, slug: str) -> HttpResponse:
    recipe = get_object_or_404(Recipe, slug=slug)
    host_id = request.POST.get("host", "")[:20]
    host = Host.objects.filter(pk=int(host_id)).first() if host_id.isdigit() else None
    if host is None:
        messages.error(request, "Choose a host to download to.")
        return redirect(recipe)
    try:
        item = request_prefetch(recipe=recipe, host=host, user=request.user)
    except CacheRefused as exc:
        messages.error(request, str(exc))
        return redirect(recipe)
    messages.success(request, f"Downloading {item.repo_id} to {host.name}: progress below.")
    return redirect("host-models", host.name)

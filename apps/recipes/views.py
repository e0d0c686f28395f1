from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.db.models import ProtectedError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.roles import EDIT_RECIPES
from apps.hosts.models import Host
from apps.recipes.forms import (
    ARCH_FIELDS,
    FLAG_FIELDS,
    IDENTITY_FIELDS,
    PlanInputForm,
    RecipeForm,
    YamlImportForm,
)
from apps.recipes.models import Recipe
from apps.recipes.plan_labels import labelled_errors
from apps.recipes.selectors import image_note, start_form_context, weights_on_hosts
from apps.recipes.services import plan_context
from apps.recipes.signals import (
    approved_mods,
    capacity_story,
    measured_checks,
    measured_corrections,
    sections,
)
from apps.recipes.startup import vllm_prediction
from apps.recipes.yaml_io import recipe_to_sparkrun_yaml, recipes_from_yaml, recipes_to_yaml
from sparkdomain import calibration
from sparkdomain.command import (
    UnsafeCommand,
    contract_problems,
    docker_run_argv,
    serve_argv,
    shell_lines,
    tool_calling,
)
from sparkdomain.planner import plan
from vllm_adapter import contract as vllm_contract


def _recipe(slug: str) -> Recipe:
    return get_object_or_404(Recipe, slug=slug)


def _edit_page(request: HttpRequest, form: RecipeForm, **context) -> HttpResponse:
    groups = [
        ("Recipe", IDENTITY_FIELDS, ""),
        ("vLLM flags", [*FLAG_FIELDS, "extra_args", "env"], ""),
        ("Architecture (for the planner)", ARCH_FIELDS, "architecture"),
    ]
    context["groups"] = [
        (title, [form[name] for name in names], note) for title, names, note in groups
    ]
    return render(request, "recipes/edit.html", {"form": form, **context})


@require_GET
def recipe_list(request: HttpRequest) -> HttpResponse:
    recipes = list(Recipe.objects.all())
    rows = [(r, r.plan()) for r in recipes]
    return render(request, "recipes/list.html", {"rows": rows})


def vllm_check(recipe: Recipe) -> dict:
    """Whether the default host's vLLM accepts the recipe today (a host's version may have
    changed since the recipe was saved)."""
    host = Host.objects.default()
    version = host.contract_version if host else vllm_contract.latest_version()
    return {
        "version": version,
        "host": host,
        "problems": [message for _, message in contract_problems(recipe, version)],
    }


@require_GET
def recipe_detail(request: HttpRequest, slug: str) -> HttpResponse:
    recipe = _recipe(slug)
    check = vllm_check(recipe)
    try:
        argv, docker_line = serve_argv(recipe), shell_lines(docker_run_argv(recipe))
    except UnsafeCommand as exc:  # a row saved before a rule (issue 38): shown, never run
        argv, docker_line = [], ""
        if str(exc) not in check["problems"]:
            check["problems"] = [*check["problems"], str(exc)]
    return render(
        request,
        "recipes/detail.html",
        {
            "recipe": recipe,
            "serve_argv": argv,
            "serve_line": shell_lines(argv),
            "docker_line": docker_line,
            "tool_calls": tool_calling(argv) if argv else None,  # and the reasoning parser
            "image_note": image_note(recipe.image),
            "runs": recipe.runs.select_related("host")[:20],
            "weights_hosts": weights_on_hosts(recipe),
            "vllm_check": check,
            **start_form_context(selected_recipe=recipe.pk),
            **plan_context(recipe.plan(), recipe.speculation),
            # Plan against measured: earlier starts of this image, per host.
            "corrections": measured_corrections(
                image=recipe.image, arch=recipe.architecture(), flags=recipe.flags(), recipe=recipe
            ),
            "plan_checks": measured_checks(recipe),
            "mod_approvals": approved_mods(recipe) if recipe.mods else [],
            "vllm_start": vllm_prediction(recipe, free_now=True),
            "check_labels": [calibration.LABELS[q] for q in calibration.QUANTITIES],
            "sections": sections(recipe, request.user),
            # one answer to "how many users": planned, measured and which bound binds
            "capacity": capacity_story(recipe),
        },
    )


@require_http_methods(["GET", "POST"])
@permission_required(EDIT_RECIPES, raise_exception=True)
def recipe_create(request: HttpRequest) -> HttpResponse:
    form = RecipeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        recipe = form.save(commit=False)
        recipe.created_by = request.user
        recipe.save()
        messages.success(request, f"Recipe “{recipe.name}” saved.")
        return redirect(recipe)
    return _edit_page(request, form, creating=True)


@require_http_methods(["GET", "POST"])
@permission_required(EDIT_RECIPES, raise_exception=True)
def recipe_edit(request: HttpRequest, slug: str) -> HttpResponse:
    recipe = _recipe(slug)
    form = RecipeForm(request.POST or None, instance=recipe)
    if request.method == "POST" and form.is_valid():
        recipe = form.save()
        messages.success(request, f"Recipe “{recipe.name}” saved.")
        return redirect(recipe)
    # The stored recipe for the title and Cancel: the form has written the rejected values
    # (a blank slug…) onto its own instance.
    return _edit_page(request, form, recipe=_recipe(slug))


@require_POST
@permission_required(EDIT_RECIPES, raise_exception=True)
def recipe_delete(request: HttpRequest, slug: str) -> HttpResponse:
    recipe = _recipe(slug)
    name = recipe.name
    try:
        recipe.delete()
    except ProtectedError:
        # Runs and benchmark jobs keep their recipe: their history names what ran.
        runs, jobs = recipe.runs.count(), recipe.jobs.count()
        messages.error(
            request,
            f"Recipe “{name}” is kept: {runs} run(s) and {jobs} benchmark job(s) refer to it, "
            "and their history must keep saying what ran. Edit it instead, or give the "
            "new version another name.",
        )
        return redirect(recipe)
    messages.success(request, f"Recipe “{name}” deleted.")
    return redirect("recipes")


@require_POST
def plan_preview(request: HttpRequest) -> HttpResponse:
    """The live re-plan behind every recipe and wizard input (htmx, debounced)."""
    form = PlanInputForm(request.POST)
    if not form.is_valid():
        return render(
            request, "recipes/partials/plan.html", {"plan_errors": labelled_errors(form.errors)}
        )

    arch, flags = form.to_planner()
    corrections = measured_corrections(image=request.POST.get("image", ""), arch=arch, flags=flags)
    return render(
        request,
        "recipes/partials/plan.html",
        {**plan_context(plan(arch, flags)), "corrections": corrections},
    )


@require_GET
def recipe_export(request: HttpRequest) -> HttpResponse:
    slugs = request.GET.getlist("slug")
    recipes = Recipe.objects.filter(slug__in=slugs) if slugs else Recipe.objects.all()
    if slugs and len(recipes) != len(set(slugs)):
        missing = sorted(set(slugs) - {r.slug for r in recipes})
        return HttpResponse(
            f"No recipe named {', '.join(missing)}.", status=404, content_type="text/plain"
        )
    if request.GET.get("format") == "sparkrun":
        # A sparkrun recipe file holds one recipe (sparkdomain/sparkrun/export.py).
        if len(slugs) != 1:
            return HttpResponse(
                "A sparkrun recipe is one recipe: give one slug (?slug=…&format=sparkrun).",
                status=400, content_type="text/plain",
            )  # fmt: skip
        try:
            text = recipe_to_sparkrun_yaml(recipes[0])
        except UnsafeCommand as exc:  # a row saved before a rule: shown, never exported
            return HttpResponse(f"This recipe cannot be exported: {exc}", status=409,
                                content_type="text/plain")  # fmt: skip
        response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="{slugify(recipes[0].name)}.sparkrun.yaml"'
        )
        return response
    filename = f"{slugify(recipes[0].name)}.yaml" if len(slugs) == 1 else "sparkpanel-recipes.yaml"
    response = HttpResponse(
        recipes_to_yaml(recipes), content_type="application/yaml; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_http_methods(["GET", "POST"])
@permission_required(EDIT_RECIPES, raise_exception=True)
def recipe_import(request: HttpRequest) -> HttpResponse:
    form = YamlImportForm(request.POST or None, request.FILES or None)
    result = None
    if request.method == "POST" and form.is_valid():
        result = recipes_from_yaml(
            form.cleaned_data["yaml_text"], replace=form.cleaned_data["replace"], user=request.user
        )
        if result.ok:
            names = ", ".join(r.name for r in [*result.created, *result.updated])
            messages.success(
                request,
                f"Imported {len(result.created)} new and updated {len(result.updated)} "
                f"recipe(s): {names}.",
            )
            for note in result.notes:
                messages.info(request, note)
            return redirect("recipes")
    status = 400 if result is not None and not result.ok else 200
    return render(request, "recipes/import.html", {"form": form, "result": result}, status=status)

"""The config wizard: model → workload → review, one form carried across three steps.

Every step posts the whole form (fields of other steps ride along as hidden inputs), so
the wizard works without JavaScript; with htmx each post swaps only the wizard, and each
input re-plans live through `recipe-plan`. Saving needs the edit-recipes permission and
goes through RecipeForm, the same validation as everywhere else.
"""

from __future__ import annotations

from decimal import Decimal

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from apps.accounts.roles import EDIT_RECIPES
from apps.recipes.forms import ARCH_FIELDS, FLAG_FIELDS, ConfigJsonForm, PlanInputForm, RecipeForm
from apps.recipes.models import Recipe
from apps.recipes.plan_labels import labelled_errors
from apps.recipes.services import config_json_fields, plan_context
from apps.recipes.signals import measured_corrections
from apps.recipes.startup import vllm_prediction
from sparkdomain import presets
from sparkdomain.command import docker_run_argv, serve_argv, shell_lines
from sparkdomain.planner import plan
from sparkdomain.spark import DEFAULT_IMAGE

STEPS = {
    1: ("Model", ["model_id", "revision", "served_model_name", *ARCH_FIELDS]),
    2: ("Workload", [*FLAG_FIELDS, "extra_args", "env"]),
    3: ("Review and save", ["name", "slug", "description", "image"]),
}
ALL_FIELDS = [f for _, fields in STEPS.values() for f in fields]
DEFAULTS = {
    "weight_format": "bf16",
    "gpu_memory_utilization": "0.85",
    "max_model_len": "8192",
    "max_num_seqs": "4",
    "kv_cache_dtype": "auto",
    "enable_prefix_caching": "unknown",  # vLLM's own choice
    "tensor_parallel_size": "1",
    "image": DEFAULT_IMAGE,
}


def _as_form_value(value) -> str:
    if isinstance(value, bool):
        return "on" if value else ""
    if isinstance(value, Decimal):
        return f"{value:.2f}" if value < 1 else str(value)
    return "" if value is None else str(value)


def _fill(data: QueryDict, values: dict) -> None:
    for key, value in values.items():
        if key in ALL_FIELDS:
            data[key] = _as_form_value(value)


@require_http_methods(["GET", "POST"])
def wizard(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        data = QueryDict(mutable=True)
        data.update(DEFAULTS)
        return _render(request, data, step=1)

    data = request.POST.copy()
    try:
        step = min(max(int(data.get("step", 1)), 1), 3)
    except ValueError:
        step = 1
    action = data.get("action", "next")
    notes: list[str] = []
    import_error = None

    if action.startswith("model:"):
        key = action.split(":", 1)[1]
        if key in presets.MODELS:
            for name in ARCH_FIELDS:  # a preset replaces the whole architecture
                data[name] = ""
            # ... and sets the model's parsers (tool calls for coding agents, reasoning).
            _fill(data, presets.architecture_of(key) | presets.parsers_of(key))
            notes.append(f"Filled in {presets.MODELS[key]['label']}.")
        return _render(request, data, step=1, notes=notes)
    if action.startswith("workload:"):
        key = action.split(":", 1)[1]
        if key in presets.WORKLOADS:
            _fill(data, {k: v for k, v in presets.WORKLOADS[key].items() if k != "label"})
            notes.append(f"Applied “{presets.WORKLOADS[key]['label']}”.")
        return _render(request, data, step=2, notes=notes)
    if action == "import_config":
        config_form = ConfigJsonForm(request.POST, request.FILES)
        if config_form.is_valid():
            fields, notes, import_error = config_json_fields(
                config_form.cleaned_data["config"], config_form.cleaned_data["quant"]
            )
            if not import_error:
                for name in ARCH_FIELDS:
                    if name in fields:
                        data[name] = ""
                _fill(data, fields)
        else:
            import_error = " ".join(config_form.non_field_errors()) or "Could not read the file."
        return _render(request, data, step=1, notes=notes, import_error=import_error)
    if action == "back":
        return _render(request, data, step=max(step - 1, 1))

    form = RecipeForm(data)
    valid = form.is_valid()
    if action == "save":
        if not request.user.has_perm(EDIT_RECIPES):
            raise PermissionDenied("Only operators and admins can save recipes.")
        if valid:
            recipe = form.save(commit=False)
            recipe.created_by = request.user
            recipe.save()
            messages.success(request, f"Recipe “{recipe.name}” saved from the wizard.")
            if request.htmx:
                response = HttpResponse(status=204)
                response["HX-Redirect"] = recipe.get_absolute_url()
                return response
            return redirect(recipe)
        # Send the user to the first step with a problem, what they typed intact.
        bad = next((n for n, (_, f) in STEPS.items() if set(f) & set(form.errors)), 3)
        return _render(request, data, step=bad, form=form, status=400)
    if set(form.errors) & set(STEPS[step][1]):
        return _render(request, data, step=step, form=form, status=400)
    return _render(request, data, step=min(step + 1, 3))


def _render(
    request: HttpRequest,
    data: QueryDict,
    *,
    step: int,
    form: RecipeForm | None = None,
    notes: list[str] | None = None,
    import_error: str | None = None,
    status: int = 200,
) -> HttpResponse:
    # Errors show only after the user tried to leave a step or save (`form` given);
    # a fresh step is not covered in complaints about fields not filled in yet.
    show_errors = form is not None
    if form is None:
        form = RecipeForm(data)
        form.is_valid()
    plan_form = PlanInputForm(data)
    if plan_form.is_valid():
        arch, flags = plan_form.to_planner()
        plan_ctx = plan_context(plan(arch, flags))
        plan_ctx["corrections"] = measured_corrections(
            image=data.get("image", ""), arch=arch, flags=flags
        )  # what vLLM measured on earlier starts of this image
    else:
        plan_ctx = {"plan_errors": labelled_errors(plan_form.errors)}
    commands = None
    vllm_start = None
    if step == 3 and plan_form.is_valid() and "model_id" in form.cleaned_data:
        preview = Recipe(**{k: v for k, v in form.cleaned_data.items() if k in ALL_FIELDS})
        preview.image = form.cleaned_data.get("image") or DEFAULT_IMAGE
        commands = {
            "serve": shell_lines(serve_argv(preview)),
            "docker": shell_lines(docker_run_argv(preview)),
        }
        vllm_start = vllm_prediction(preview, free_now=True)  # what admission goes by
    hidden = {k: data.getlist(k) for k in data if k in ALL_FIELDS and k not in STEPS[step][1]}
    context = {
        "step": step,
        "steps": [(n, title) for n, (title, _) in STEPS.items()],
        "form": form,
        "show_errors": show_errors,
        "visible": [form[name] for name in STEPS[step][1]],
        "hidden": hidden,
        "notes": notes or [],
        "import_error": import_error,
        "config_form": ConfigJsonForm(),
        "model_presets": presets.MODELS,
        "workload_presets": presets.WORKLOADS,
        "commands": commands,
        "vllm_start": vllm_start,
        "can_save": request.user.has_perm(EDIT_RECIPES),
        **plan_ctx,
    }
    if request.htmx:
        # htmx does not swap error responses; the partial carries the errors itself.
        return render(request, "recipes/partials/wizard_body.html", context)
    return render(request, "recipes/wizard.html", context, status=status)

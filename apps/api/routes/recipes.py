from django.db import transaction
from django.forms.models import model_to_dict
from django.http import HttpRequest
from ninja import Router, Status
from ninja.pagination import paginate

from apps.accounts.roles import EDIT_RECIPES, VIEW_PANEL
from apps.api.auth import needs, require
from apps.api.errors import ERRORS, ApiError
from apps.api.pagination import Page
from apps.api.routes.common import form_errors, get_or_404
from apps.api.schemas import RecipeFields, RecipeOut, YamlImportIn, YamlImportOut
from apps.recipes.forms import RecipeForm
from apps.recipes.models import Recipe
from apps.recipes.yaml_io import FIELDS, recipe_form_data, recipes_from_yaml
from sparkdomain.bounded import YAML_LIMITS

router = Router(tags=["recipes"])

MAX_YAML_BYTES = YAML_LIMITS.max_bytes  # the bounded reader's own limit


def _save(request: HttpRequest, values: dict, instance: Recipe | None) -> Recipe:
    """Through RecipeForm, exactly like the browser: the ≤ 0.90 rule and every flag check."""
    form = RecipeForm(data=recipe_form_data(values), instance=instance)
    if not form.is_valid():
        raise ApiError(422, "The recipe was not saved.", fields=form_errors(form))
    with transaction.atomic():
        recipe = form.save(commit=False)
        if instance is None:
            recipe.created_by = request.user
        recipe.save()
    return recipe


@router.get("/recipes", response={200: list[RecipeOut], **ERRORS}, summary="List recipes")
@paginate(Page)
def list_recipes(request: HttpRequest):
    require(request, VIEW_PANEL)
    return Recipe.objects.all()


@router.post(
    "/recipes/import",
    auth=needs(EDIT_RECIPES),
    response={200: YamlImportOut, **ERRORS},
    summary="Import recipes (YAML)",
)
def import_recipes(request: HttpRequest, payload: YamlImportIn):
    """Operators. All or nothing: any problem and nothing is saved (422, problems by recipe)."""
    require(request, EDIT_RECIPES)
    if len(payload.yaml.encode()) > MAX_YAML_BYTES:
        raise ApiError(422, "The YAML is larger than 1 MB; that is not a recipe file.",
                       fields={"yaml": ["larger than 1 MB"]})  # fmt: skip
    result = recipes_from_yaml(payload.yaml, replace=payload.replace, user=request.user)
    if not result.ok:
        fields: dict[str, list[str]] = {}
        for problem in result.problems:
            for field, messages in problem.errors.items():
                key = problem.label if field == "__all__" else f"{problem.label}.{field}"
                fields.setdefault(key, []).extend(str(m) for m in messages)
        raise ApiError(422, "Nothing was imported.", fields=fields)
    return {
        "created": [r.slug for r in result.created],
        "updated": [r.slug for r in result.updated],
        "notes": result.notes,
    }


@router.get("/recipes/{slug}", response={200: RecipeOut, **ERRORS}, summary="One recipe")
def get_recipe(request: HttpRequest, slug: str):
    require(request, VIEW_PANEL)
    return get_or_404(Recipe.objects.all(), "recipe", slug=slug)


@router.post(
    "/recipes",
    auth=needs(EDIT_RECIPES),
    response={201: RecipeOut, **ERRORS},
    summary="Create a recipe",
)
def create_recipe(request: HttpRequest, payload: RecipeFields):
    """Operators. Field-level errors (422) use the same words as the recipe form."""
    require(request, EDIT_RECIPES)
    return Status(201, _save(request, payload.model_dump(exclude_unset=True), None))


@router.patch(
    "/recipes/{slug}",
    auth=needs(EDIT_RECIPES),
    response={200: RecipeOut, **ERRORS},
    summary="Update a recipe",
)
def update_recipe(request: HttpRequest, slug: str, payload: RecipeFields):
    """Operators. Only the fields sent change; the whole recipe is validated again."""
    require(request, EDIT_RECIPES)
    recipe = get_or_404(Recipe.objects.all(), "recipe", slug=slug)
    values = model_to_dict(recipe, fields=FIELDS) | payload.model_dump(exclude_unset=True)
    return _save(request, values, recipe)

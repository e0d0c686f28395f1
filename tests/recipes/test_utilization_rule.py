"""The ≤ 0.90 rule holds on every path a value can take (SPEC §1)."""

from decimal import Decimal

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse

from apps.recipes.forms import RecipeForm
from apps.recipes.models import Recipe
from apps.recipes.yaml_io import recipes_from_yaml
from sparkdomain.command import UnsafeCommand, assert_safe_argv, serve_argv
from tests.recipes.factories import make_recipe, recipe_data

pytestmark = pytest.mark.django_db
WHY = "freezes the whole machine"


def test_model_validation_refuses_above_0_90_and_explains_why():
    recipe = Recipe(
        name="x", model_id="a/b", gpu_memory_utilization=Decimal("0.95"), max_model_len=4096
    )
    with pytest.raises(ValidationError) as info:
        recipe.full_clean()
    message = " ".join(info.value.message_dict["gpu_memory_utilization"])
    assert "at most 0.90" in message and WHY in message


@pytest.mark.parametrize("value", ["0.95", "0.91", "1.00"])
def test_a_raw_update_above_the_limit_fails_at_the_database(value):
    recipe = make_recipe()
    with pytest.raises(IntegrityError), transaction.atomic():
        Recipe.objects.filter(pk=recipe.pk).update(gpu_memory_utilization=Decimal(value))
    recipe.refresh_from_db()
    assert recipe.gpu_memory_utilization == Decimal("0.85")


def test_the_database_also_refuses_zero():
    recipe = make_recipe()
    with pytest.raises(IntegrityError), transaction.atomic():
        Recipe.objects.filter(pk=recipe.pk).update(gpu_memory_utilization=Decimal("0"))


def test_0_90_itself_is_allowed_everywhere():
    recipe = make_recipe(gpu_memory_utilization=Decimal("0.90"))
    assert "--gpu-memory-utilization" in serve_argv(recipe)
    assert serve_argv(recipe)[serve_argv(recipe).index("--gpu-memory-utilization") + 1] == "0.90"


def test_form_refuses_and_keeps_what_the_user_typed():
    form = RecipeForm(data=recipe_data(name="Mine", gpu_memory_utilization="0.95"))
    assert not form.is_valid()
    assert WHY in " ".join(form.errors["gpu_memory_utilization"])
    assert form["gpu_memory_utilization"].value() == "0.95"
    assert form["name"].value() == "Mine"


def test_browser_form_post_is_refused_with_the_reason_and_the_input_kept(client_as, operator):
    response = client_as(operator).post(
        reverse("recipe-create"), recipe_data(name="Kept name", gpu_memory_utilization="0.95")
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert WHY in html
    assert 'value="Kept name"' in html and 'value="0.95"' in html
    assert not Recipe.objects.filter(name="Kept name").exists()


def test_django_admin_refuses_with_the_same_reason(client_as, admin_user):
    response = client_as(admin_user).post(
        reverse("admin:recipes_recipe_add"),
        {
            **recipe_data(name="Admin try", slug="admin-try", gpu_memory_utilization="0.92"),
            **GUARD_INLINE,
        },
    )
    assert response.status_code == 200
    assert WHY in response.content.decode()
    assert not Recipe.objects.filter(name="Admin try").exists()


# What the admin page posts besides the recipe's fields: its inline for the recipe's guard
# settings (apps/recipes/admin.py), empty.
GUARD_INLINE = {"hang_policy-TOTAL_FORMS": "0", "hang_policy-INITIAL_FORMS": "0",
                "hang_policy-MIN_NUM_FORMS": "0", "hang_policy-MAX_NUM_FORMS": "1"}  # fmt: skip


def test_django_admin_saves_a_valid_recipe(client_as, admin_user):
    response = client_as(admin_user).post(
        reverse("admin:recipes_recipe_add"),
        {**recipe_data(name="Admin ok", slug="admin-ok"), **GUARD_INLINE},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Recipe.objects.get(slug="admin-ok").created_by == admin_user


def test_django_admin_saves_a_recipe_with_its_guard_settings(client_as, admin_user):
    inline = {**GUARD_INLINE, "hang_policy-TOTAL_FORMS": "1", "hang_policy-0-action": "restart",
              "hang_policy-0-stall_s": "300", "hang_policy-0-max_restarts": "2",
              "hang_policy-0-backoff_s": "60", "hang_policy-0-ttft_slo_s": "2.5"}  # fmt: skip
    response = client_as(admin_user).post(
        reverse("admin:recipes_recipe_add"),
        {**recipe_data(name="Admin guarded", slug="admin-guarded"), **inline},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    policy = Recipe.objects.get(slug="admin-guarded").hang_policy
    assert (policy.action, policy.stall_s, policy.max_restarts, policy.backoff_s,
            policy.ttft_slo_s) == ("restart", 300, 2, 60, 2.5)  # fmt: skip


def test_yaml_import_refuses_and_imports_nothing_at_all():
    good = {"name": "Good one", "model_id": "a/b", "gpu_memory_utilization": 0.85}
    bad = {"name": "Bad one", "model_id": "a/c", "gpu_memory_utilization": 0.95}
    doc = {
        "sparkpanel": 1,
        "recipes": [{**good, "max_model_len": 4096}, {**bad, "max_model_len": 4096}],
    }
    result = recipes_from_yaml(yaml.safe_dump(doc))
    assert not result.ok
    assert [p.label for p in result.problems] == ["recipe 2 (Bad one)"]
    assert WHY in " ".join(result.problems[0].errors["gpu_memory_utilization"])
    assert not Recipe.objects.filter(name__in=["Good one", "Bad one"]).exists()


def test_sparkrun_import_refuses_too():
    doc = {"model": "nvidia/X-NVFP4", "container": "vllm/vllm-openai:cu130-nightly",
           "defaults": {"gpu_memory_utilization": 0.95, "max_model_len": 4096}}  # fmt: skip
    result = recipes_from_yaml(yaml.safe_dump(doc))
    assert not result.ok
    assert WHY in str(result.problems)


def test_wizard_crafted_save_above_the_limit_is_refused(client_as, operator):
    data = recipe_data(name="Crafted", gpu_memory_utilization="0.99", step="3", action="save")
    response = client_as(operator).post(reverse("recipe-wizard"), data)
    assert response.status_code == 400
    assert WHY in response.content.decode()
    assert not Recipe.objects.filter(name="Crafted").exists()


def test_the_live_planner_refuses_with_the_same_explanation(client_as, member):
    response = client_as(member).post(
        reverse("recipe-plan"), recipe_data(gpu_memory_utilization="0.93")
    )
    assert response.status_code == 200
    assert WHY in response.content.decode()
    assert "data-verdict" not in response.content.decode()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["vllm", "serve", "a/b", "--max-model-len", "4096"], "missing"),
        (["vllm", "serve", "a/b", "--gpu-memory-utilization", "0.92"], "not allowed"),
        (["vllm", "serve", "a/b", "--gpu-memory-utilization=0.95"], "not allowed"),
        (
            [
                "vllm",
                "serve",
                "a/b",
                "--gpu-memory-utilization",
                "0.8",
                "--gpu-memory-utilization",
                "0.99",
            ],
            "2 times",
        ),
        (["vllm", "serve", "a/b", "--gpu-memory-utilization", "nan"], "not allowed"),
    ],
)
def test_the_command_guard_refuses_any_unsafe_vector(argv, message):
    with pytest.raises(UnsafeCommand, match=message):
        assert_safe_argv(argv)


def test_the_rendered_command_always_carries_an_explicit_utilization():
    recipe = make_recipe(gpu_memory_utilization=Decimal("0.8"))
    argv = serve_argv(recipe)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-32B"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.80"

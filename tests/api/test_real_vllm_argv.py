"""Done-when of the real-vLLM issue: real vLLM 0.33.0's own parser accepts the `argv` that
GET /api/v1/recipes/ returns for every preset and for every recipe the wizard saves for the
five rows of the seed's decision table — and refuses what the panel shipped before."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.hosts.models import Host
from apps.recipes.models import Recipe
from sparkdomain import presets
from tests.recipes.factories import recipe_data
from tests.vllm_adapter.real_parser import real_check
from vllm_adapter import contract

pytestmark = [pytest.mark.real_vllm, pytest.mark.django_db]


def test_real_vllm_accepts_every_argv_the_api_returns(api_as, client_as, operator):
    Host.objects.create(name="spark-1", engine="docker", vllm_version="0.33.0")
    wizard = client_as(operator)
    for key, row in presets.WORKLOADS.items():
        data = recipe_data(name=f"Wizard {key}", slug="", step="3", action="save")
        data.update({k: str(v) for k, v in row.items() if k != "label"})
        response = wizard.post(reverse("recipe-wizard"), data)
        assert response.status_code == 302, response.content.decode()[:2000]
    items = api_as(operator).get("/recipes", limit=100).data["items"]
    saved = {r["slug"] for r in items}
    assert {r.slug for r in Recipe.objects.presets()} <= saved
    assert len([s for s in saved if s.startswith("wizard-")]) == 5
    vectors = [r["argv"] for r in items]
    assert all(v[:2] == ["vllm", "serve"] and "--port" in v for v in vectors)
    # The vectors the panel shipped before this issue, to show the test can fail.
    old = ["vllm", "serve", "m", "--gpu-memory-utilization", "0.85", "--quantization", "nvfp4",
           "--swap-space", "0"]  # fmt: skip
    answers = real_check([*vectors, old], "0.33.0")
    for answer in answers[:-1]:
        assert answer["ok"], (answer["argv"], answer["error"])
        assert not contract.load("0.33.0").check(answer["argv"]), answer["argv"]
    assert answers[-1] == {
        "argv": old, "ok": False, "error": "vllm: error: unrecognized arguments: --swap-space 0"
    }  # fmt: skip

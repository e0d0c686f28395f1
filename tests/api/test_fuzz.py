"""Property-based fuzzing of the served OpenAPI schema (schemathesis): no input, valid or
not, makes the API answer 500, and every answer matches what the schema declares.

Bounded (FUZZ_EXAMPLES per operation, default 12) so it fits in `make test`; run more with
e.g. `FUZZ_EXAMPLES=200 pytest tests/api/test_fuzz.py`.

`test_hostile_sizes_never_break_the_api` puts hostile sizes where schemathesis' own cases
have values: 100,000-character strings, lists nested 40 to 900 deep, 4,000-digit integers,
1e308, 10,000-element lists (tests/api/test_hostile_bodies.py sends the bytes a serializer
cannot make: 5,000-digit literals, NaN, 100,000 levels, non-UTF-8).
"""

import os

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from apps.api.api import api
from apps.api.tokens import token_create

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture
def fuzz_token(operator, sim_host, qwen):
    """An operator (the role that reaches every operation) on a panel with a host and a
    recipe, so generated slugs and names sometimes hit real objects."""
    return token_create(user=operator, name="fuzz")[1]


@pytest.fixture(autouse=True)
def _wsgi_in_the_test_transaction():
    # The real WSGI stack runs in this thread, inside the test's transaction: like Django's
    # test client, keep the handler from closing the test database after each request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# The schema exactly as /api/v1/openapi.json serves it (test_auth checks that URL), built at
# collection time without a database; requests go through Django's real WSGI handler.
schema = schemathesis.openapi.from_dict(api.get_openapi_schema(path_params={}))
schema.app = WSGIHandler()


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
    derandomize=True,
)
def test_no_input_breaks_the_api(case, fuzz_token):
    case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_token}"}, checks=CHECKS)


def test_the_served_schema_is_valid_openapi(member):
    from django.test import Client
    from openapi_spec_validator import validate

    _, token = token_create(user=member, name="schema")
    served = Client().get("/api/v1/openapi.json", headers={"Authorization": f"Bearer {token}"})
    document = served.json()
    validate(document)  # raises with the path of the first problem
    assert document["openapi"].startswith("3.1")
    operations = [op for path in document["paths"].values() for op in path.values()]
    assert len(operations) >= 20
    # Every operation documents the one error shape and needs a bearer token or a session.
    for op in operations:
        assert {"401", "403", "422"} <= set(op["responses"]), op["operationId"]
        assert op.get("security"), op["operationId"]


def _nested(depth: int):
    value: object = "x"
    for _ in range(depth):
        value = [value]
    return value


HOSTILE_SIZES = st.one_of(
    st.sampled_from(
        [
            "x" * 100_000, "{a}" * 10_000, _nested(40), _nested(900), {"a": _nested(100)},
            10**4000, -(10**4000), 10**19, 2**63, 1e308, -1e308, 5e-324,
            list(range(10_000)), ["--load-format"] * 10_000, {str(i): i for i in range(5_000)},
        ]
    ),
    st.integers(min_value=-(10**60), max_value=10**60),
    st.floats(allow_nan=False, allow_infinity=False),  # NaN: test_hostile_bodies sends it
)  # fmt: skip


@pytest.mark.django_db
@schema.parametrize()
@schema.given(hostile=HOSTILE_SIZES, where=st.integers(min_value=0, max_value=50))
@settings(
    max_examples=max(3, EXAMPLES // 2),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_hostile_sizes_never_break_the_api(case, hostile, where, fuzz_token):
    """One value of each generated case (a body field, else a query parameter) becomes
    hostile; the answer is a 4xx in the error shape or a success, never a 5xx."""
    if isinstance(case.body, dict) and case.body:
        keys = sorted(case.body)
        case.body[keys[where % len(keys)]] = hostile
    elif case.body is not None and not isinstance(case.body, dict):
        case.body = {"payload": hostile}
    elif case.query:
        keys = sorted(case.query)
        case.query[keys[where % len(keys)]] = str(hostile)[:5_000]
    case.call_and_validate(
        headers={"Authorization": f"Bearer {fuzz_token}"},
        checks=[not_a_server_error, status_code_conformance, content_type_conformance],
    )

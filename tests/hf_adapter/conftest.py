"""The local hub (hubsim) the adapter downloads from."""

from tests.hubsim.conftest import hub  # noqa: F401

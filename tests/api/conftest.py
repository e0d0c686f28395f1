from __future__ import annotations

import json

import pytest
from django.test import Client

from apps.api.tokens import token_create


class Api:
    """A token-authenticated JSON client for /api/v1/."""

    def __init__(self, token: str | None = None, **headers: str):
        self.client = Client()
        self.headers = dict(headers)
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body=None, **headers):
        kwargs = {"headers": {**self.headers, **headers}}
        if body is not None:
            kwargs["data"] = body if isinstance(body, str | bytes) else json.dumps(body)
            kwargs["content_type"] = "application/json"
        response = getattr(self.client, method)(f"/api/v1{path}", **kwargs)
        response.data = (
            response.json() if response["Content-Type"].startswith("application/json") else None
        )
        return response

    def get(self, path, **params):
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return self.call("get", f"{path}?{query}" if query else path)

    def post(self, path, body=None, **headers):
        return self.call("post", path, body if body is not None else {}, **headers)

    def patch(self, path, body, **headers):
        return self.call("patch", path, body, **headers)


def api_client(user) -> Api:
    """The API as `user`, through a fresh token of theirs (the `api_as` fixture)."""
    _token, clear = token_create(user=user, name="test")
    return Api(clear)


@pytest.fixture
def anon_api():
    return Api()


def assert_error(response, status: int, code: str | None = None):
    assert response.status_code == status, (response.status_code, response.content[:500])
    error = response.json()["error"]
    assert set(error) == {"code", "message", "fields"}
    assert error["message"]
    if code:
        assert error["code"] == code, error
    return error

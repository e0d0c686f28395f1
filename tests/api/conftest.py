from __future__ import annotations

import json
import socket
from email import message_from_bytes

import pytest
from aiosmtpd.controller import Controller
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


class Inbox:
    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.rcpt_tos, message_from_bytes(envelope.content)))
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp(settings):
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.DEFAULT_FROM_EMAIL = "sparkpanel@test.lan"
    yield inbox
    controller.stop()


@pytest.fixture
def eager():
    from sparkpanel.celery import app

    saved = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved

"""ASGI entry point: the OpenAI gateway for /v1, Django for the rest of HTTP, Channels for
WebSockets, behind the edge checks.

HTTP bodies over the limit are refused with 413 before anything reads them (BodyLimit).
Sockets must come from the panel's own origin, scheme and port included, or a
CSRF_TRUSTED_ORIGINS one (OriginCheck); a path with no route is closed with 4404
(KnownSocketPaths); the rest carry the session user, and each consumer still checks the
user's role before accepting. See sparkpanel/edge.py.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkpanel.settings")
# Initialise Django (apps, models) before importing anything that touches them.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from apps.gateway.asgi import Gateway, handles  # noqa: E402
from sparkpanel.edge import (  # noqa: E402
    BodyLimit,
    KnownSocketPaths,
    OriginCheck,
    connection_of,
    mark_on_success,
)
from sparkpanel.routing import websocket_urlpatterns  # noqa: E402


class HttpRouter:
    """/v1/…, /tokenize and /detokenize go to the OpenAI gateway (its own body limit and
    errors in OpenAI's shape, no Django on the way: apps/gateway/asgi.py); the rest to
    Django behind the body limit. A gateway answer of 2xx (given only to an admitted key)
    marks the connection as authenticated for the server's per-address caps
    (sparkpanel/httpserver.py); once it is, the gateway gets `send` unwrapped."""

    def __init__(self, gateway, django_app):
        self.gateway, self.django_app = gateway, django_app

    async def __call__(self, scope, receive, send):
        if handles(scope["path"]):
            connection = connection_of(scope)
            # A CORS preflight's 204 admits no key: it never marks the connection.
            if (
                connection is not None
                and not connection.authenticated
                and scope["method"] != "OPTIONS"
            ):
                send = mark_on_success(send, connection)
            return await self.gateway(scope, receive, send)
        return await self.django_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": HttpRouter(Gateway(), BodyLimit(django_asgi_app)),
        "websocket": OriginCheck(
            KnownSocketPaths(
                AuthMiddlewareStack(URLRouter(websocket_urlpatterns)), websocket_urlpatterns
            )
        ),
    }
)

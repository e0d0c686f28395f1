"""WebSocket URL patterns; each app adds its consumers here."""

from django.urls import path

from apps.chat.consumers import ChatConsumer
from apps.core.consumers import EventsConsumer
from apps.overview.telemetry_sockets import TelemetryConsumer

websocket_urlpatterns = [
    path("ws/events/", EventsConsumer.as_asgi()),
    path("ws/telemetry/host/<str:host>/", TelemetryConsumer.as_asgi()),
    path("ws/telemetry/run/<int:run>/", TelemetryConsumer.as_asgi()),
    path("ws/chat/<int:pk>/", ChatConsumer.as_asgi()),
]

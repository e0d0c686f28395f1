"""/live/: every live element of a page, rendered from the server's current state
(apps/core/live.py)."""

from django.urls import path

from apps.core import live

urlpatterns = [
    path("<slug:kind>/", live.live_element, name="live-singleton"),
    path("<slug:kind>/<str:key>/", live.live_element, name="live-element"),
]

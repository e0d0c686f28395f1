from django.contrib import admin
from django.urls import include, path

from apps.telemetry.views import panel_metrics

urlpatterns = [
    path("", include("apps.core.urls")),
    path("live/", include("apps.core.live_urls")),
    path("accounts/", include("apps.accounts.urls")),
    path("recipes/", include("apps.recipes.urls")),
    path("runs/", include("apps.runs.urls")),
    path("hosts/", include("apps.hosts.urls")),
    path("benchmarks/", include("apps.benchmarks.urls")),
    path("chat/", include("apps.chat.urls")),
    path("api/", include("apps.api.urls")),
    path("telemetry/", include("apps.telemetry.urls")),
    path("admin/", admin.site.urls),
    path("metrics", panel_metrics, name="panel-metrics"),
]

handler403 = "apps.core.views.permission_denied"
handler500 = "apps.core.views.server_error"

from django.contrib import admin
from django.urls import include, path

from apps.runs.cache_urls import host_urlpatterns, recipe_urlpatterns

urlpatterns = [
    path("", include("apps.overview.urls")),  # the dashboard, /metrics, telemetry back-fill
    path("", include("apps.core.urls")),
    path("live/", include("apps.core.live_urls")),
    path("accounts/", include("apps.accounts.urls")),
    path("accounts/", include("apps.api.profile_urls")),  # the profile's token/webhook URLs
    path("", include("apps.gateway.urls")),  # gateway keys (profile), the Usage page
    path("recipes/", include(recipe_urlpatterns)),  # a recipe's "Download now"
    path("recipes/", include("apps.recipes.urls")),
    path("runs/", include("apps.runs.urls")),
    path("hosts/", include(host_urlpatterns)),  # a host's model cache (apps/runs)
    path("hosts/", include("apps.hosts.urls")),
    path("benchmarks/", include("apps.benchmarks.urls")),
    path("chat/", include("apps.chat.urls")),
    path("api/", include("apps.api.urls")),
    path("admin/", admin.site.urls),
]

handler403 = "apps.core.views.permission_denied"
handler500 = "apps.overview.views.server_error"

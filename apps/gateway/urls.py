from django.urls import path

from apps.gateway import limit_views, profile_sections, views

urlpatterns = [
    path("accounts/profile/keys/", profile_sections.key_create_view, name="gateway-key-create"),
    path(
        "accounts/profile/keys/<int:pk>/revoke/",
        profile_sections.key_revoke_view,
        name="gateway-key-revoke",
    ),
    path("usage/", views.usage_page, name="usage"),
    path("gateway/", views.models_page, name="gateway-models"),
    path("gateway/aliases/<int:pk>/delete/", views.alias_delete, name="gateway-alias-delete"),
    path("gateway/on-demand/", views.on_demand_save, name="gateway-on-demand-save"),
    path(
        "gateway/on-demand/<int:pk>/delete/",
        views.on_demand_delete,
        name="gateway-on-demand-delete",
    ),
    path("usage.csv", views.usage_csv, name="usage-csv"),
    path("gateway/limits/", limit_views.limits_page, name="gateway-limits"),
    path(
        "gateway/limits/roles/<slug:role>/",
        limit_views.role_limits_save,
        name="gateway-limits-role",
    ),
    path("gateway/limits/users/", limit_views.user_limits_add, name="gateway-limits-user-add"),
    path(
        "gateway/limits/users/<int:pk>/",
        limit_views.user_limits_save,
        name="gateway-limits-user",
    ),
    path("gateway/limits/keys/<int:pk>/", limit_views.key_limits_save, name="gateway-limits-key"),
]

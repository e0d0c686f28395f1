"""The overview's routes, included at the root: the paths and names they always had."""

from django.urls import path

from apps.overview import audit_views, telemetry_views, views
from apps.overview.panel_metrics import panel_metrics

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("metrics", panel_metrics, name="panel-metrics"),
    path("audit/", audit_views.audit_log, name="audit"),
    path("audit/export.csv", audit_views.audit_csv, name="audit-csv"),
    path(
        "telemetry/host/<str:name>/backfill.json",
        telemetry_views.host_backfill,
        name="telemetry-host-backfill",
    ),
    path(
        "telemetry/run/<int:pk>/backfill.json",
        telemetry_views.run_backfill,
        name="telemetry-run-backfill",
    ),
]

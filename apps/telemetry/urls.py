from django.urls import path

from apps.telemetry import views

urlpatterns = [
    path("host/<str:name>/backfill.json", views.host_backfill, name="telemetry-host-backfill"),
    path("run/<int:pk>/backfill.json", views.run_backfill, name="telemetry-run-backfill"),
]

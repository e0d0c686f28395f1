from django.urls import path

from apps.core import views

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("status/", views.status_partial, name="status"),
    path("notices/", views.notice_create, name="notice-create"),
    path("healthz", views.healthz, name="healthz"),
]

from django.urls import path

from apps.core import views

urlpatterns = [
    path("status/", views.status_partial, name="status"),
    path("notices/", views.notice_create, name="notice-create"),
    path("notices/<int:pk>/delete/", views.notice_delete_view, name="notice-delete"),
    path("healthz", views.healthz, name="healthz"),
]

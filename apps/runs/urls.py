from django.urls import path

from apps.runs import views

urlpatterns = [
    path("", views.run_list, name="runs"),
    path("start/", views.run_start_view, name="run-start"),
    path("<int:pk>/", views.run_detail, name="run-detail"),
    path("<int:pk>/stop/", views.run_stop_view, name="run-stop"),
    path("<int:pk>/restart/", views.run_restart_view, name="run-restart"),
    path("<int:pk>/pin/", views.run_pin_view, {"pinned": True}, name="run-pin"),
    path("<int:pk>/unpin/", views.run_pin_view, {"pinned": False}, name="run-unpin"),
]

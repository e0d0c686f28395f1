from django.urls import path

from apps.hosts import views
from apps.hosts.detail import host_detail

urlpatterns = [
    path("", views.host_list, name="hosts"),
    path("<str:name>/", host_detail, name="host-detail"),
    path("<str:name>/retire/", views.host_retire_view, name="host-retire"),
    path("<str:name>/return/", views.host_return_view, name="host-return"),
]

from django.urls import path

from apps.hosts import views
from apps.hosts.detail import host_detail

urlpatterns = [
    path("", views.host_list, name="hosts"),
    path("<str:name>/", host_detail, name="host-detail"),
]

from django.urls import path

from apps.hosts import views

urlpatterns = [path("", views.host_list, name="hosts")]

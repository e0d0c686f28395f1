from django.urls import path

from apps.runs import cache_views

# Under /hosts/ (a host's model cache) and /recipes/ ("Download now"): sparkpanel/urls.py.
host_urlpatterns = [
    path("<str:name>/models/", cache_views.host_models, name="host-models"),
    path("<str:name>/models/rescan/", cache_views.host_models_rescan, name="host-models-rescan"),
    path("<str:name>/models/delete/", cache_views.host_models_delete, name="host-models-delete"),
    path("<str:name>/models/downloads/<int:pk>/cancel/", cache_views.host_models_cancel,
         name="host-models-cancel"),
]  # fmt: skip
recipe_urlpatterns = [
    path("<slug:slug>/download/", cache_views.recipe_download, name="recipe-download"),
]

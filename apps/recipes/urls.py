from django.urls import path

from apps.recipes import registry_views, views, wizard

urlpatterns = [
    path("", views.recipe_list, name="recipes"),
    path("new/", views.recipe_create, name="recipe-create"),
    path("wizard/", wizard.wizard, name="recipe-wizard"),
    path("plan/", views.plan_preview, name="recipe-plan"),
    path("import/", views.recipe_import, name="recipe-import"),
    path("export/", views.recipe_export, name="recipe-export"),
    path("registries/", registry_views.registry_list, name="registries"),
    path("registries/<slug:name>/", registry_views.registry_detail, name="registry-detail"),
    path("registries/<slug:name>/fetch/", registry_views.registry_fetch, name="registry-fetch"),
    path("registries/<slug:name>/import/", registry_views.registry_import, name="registry-import"),
    path(
        "registries/<slug:name>/update/<slug:slug>/",
        registry_views.registry_update,
        name="registry-update",
    ),
    path("<slug:slug>/", views.recipe_detail, name="recipe-detail"),
    path("<slug:slug>/edit/", views.recipe_edit, name="recipe-edit"),
    path("<slug:slug>/delete/", views.recipe_delete, name="recipe-delete"),
]

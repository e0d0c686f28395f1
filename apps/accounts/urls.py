from django.contrib.auth import views as auth_views
from django.urls import path

from apps.accounts import views
from apps.accounts.password import PasswordChangeView
from apps.api import webhooks

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="accounts/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", PasswordChangeView.as_view(), name="password-change"),
    path("profile/", views.profile, name="profile"),
    path("profile/tokens/<int:pk>/revoke/", views.token_revoke_view, name="token-revoke"),
    path("profile/webhooks/", webhooks.webhook_add, name="webhook-add"),
    path("profile/webhooks/<int:pk>/delete/", webhooks.webhook_delete, name="webhook-delete"),
    path("profile/webhooks/<int:pk>/test/", webhooks.webhook_test, name="webhook-test"),
]

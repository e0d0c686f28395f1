from django.contrib.auth import views as auth_views
from django.urls import path

from apps.accounts import users, views
from apps.accounts.password import PasswordChangeView

# The profile page's sections add their own URLs under profile/ (e.g. the API's tokens and
# webhooks: apps/api/profile_urls.py, included under accounts/ in sparkpanel/urls.py).
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
    # The team's accounts (admins): apps/accounts/users.py
    path("users/", users.users, name="users"),
    path("users/<int:pk>/role/", users.user_role_change, name="user-role"),
    path("users/<int:pk>/active/", users.user_active, name="user-active"),
    path("users/<int:pk>/reset/", users.user_password_reset, name="user-reset"),
    # Where a set-password link leads (open: the signed link is the credential).
    path("set-password/<uidb64>/<token>/", users.SetPasswordView.as_view(), name="set-password"),
]

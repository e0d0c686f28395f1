from django.contrib.auth import views as auth_views
from django.urls import path

from apps.accounts import views
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
]

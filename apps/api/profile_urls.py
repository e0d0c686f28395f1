"""The API's URLs on the profile page (its token and webhook sections), included under
accounts/ in sparkpanel/urls.py beside the accounts app's own (same paths and names as ever:
/accounts/profile/tokens/…, /accounts/profile/webhooks/…)."""

from django.urls import path

from apps.api.email_alerts_ui import email_alerts_save, email_alerts_test
from apps.api.profile_sections import token_revoke_view
from apps.api.webhooks.ui import webhook_add, webhook_delete, webhook_test

urlpatterns = [
    path("profile/tokens/<int:pk>/revoke/", token_revoke_view, name="token-revoke"),
    path("profile/webhooks/", webhook_add, name="webhook-add"),
    path("profile/webhooks/<int:pk>/delete/", webhook_delete, name="webhook-delete"),
    path("profile/webhooks/<int:pk>/test/", webhook_test, name="webhook-test"),
    path("profile/email-alerts/", email_alerts_save, name="email-alerts-save"),
    path("profile/email-alerts/test/", email_alerts_test, name="email-alerts-test"),
]

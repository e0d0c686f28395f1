from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _sync_role_groups(sender, **kwargs) -> None:
    from apps.accounts.services import role_groups_sync

    role_groups_sync()


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Accounts and roles"

    def ready(self) -> None:
        # After every migrate the three role groups exist with exactly their permissions.
        post_migrate.connect(_sync_role_groups, sender=self, dispatch_uid="accounts.role_groups")
        # Imported here: they import models, not loaded yet when Django imports this module.
        from apps.accounts import revoke, views

        # Open sockets follow the account: sign-out, deactivation, role or password changes.
        revoke.connect()
        # The profile page's own card; apps above register theirs in their ready().
        views.register_sections()

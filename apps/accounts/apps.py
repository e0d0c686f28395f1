from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Accounts and roles"

    def ready(self) -> None:
        from apps.accounts.services import role_groups_sync

        def _sync(sender, **kwargs):
            role_groups_sync()

        # After every migrate the three role groups exist with exactly their permissions.
        post_migrate.connect(_sync, sender=self, dispatch_uid="accounts.role_groups_sync")

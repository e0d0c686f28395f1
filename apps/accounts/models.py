from django.db import models

from apps.accounts.roles import CAPABILITIES


class Capability(models.Model):
    """Anchor for the panel's role permissions that are not one model's add/change/delete.

    No table: Django only needs a content type to hang the permission rows on.
    """

    class Meta:
        managed = False
        default_permissions = ()
        permissions = list(CAPABILITIES.items())

    def __str__(self) -> str:
        return "capability"

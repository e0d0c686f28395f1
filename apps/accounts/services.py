"""Writes that concern users and roles."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.db import transaction

from apps.accounts.roles import APP_LABEL, CAPABILITIES, ROLE_CAPABILITIES, ROLE_ORDER, Role
from apps.audit import context as audit_context
from apps.audit import services as audit


def role_groups_sync() -> None:
    """Create the role groups and give each exactly its capabilities (idempotent)."""
    from django.contrib.contenttypes.models import ContentType

    from apps.accounts.models import Capability

    # post_migrate can fire before the permission rows exist on a brand-new database.
    ct = ContentType.objects.get_for_model(Capability, for_concrete_model=False)
    for codename, name in CAPABILITIES.items():
        Permission.objects.get_or_create(
            content_type=ct, codename=codename, defaults={"name": name}
        )
    for role, codenames in ROLE_CAPABILITIES.items():
        group, _ = Group.objects.get_or_create(name=role.value)
        perms = Permission.objects.filter(content_type__app_label=APP_LABEL, codename__in=codenames)
        group.permissions.set(perms)


def user_role(user: AbstractUser) -> Role | None:
    """The strongest role a user holds; superusers count as admins."""
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return Role.ADMIN
    names = set(user.groups.values_list("name", flat=True))
    for role in ROLE_ORDER:
        if role.value in names:
            return role
    return None


@transaction.atomic
def user_set_role(*, user: AbstractUser, role: Role, _audit: bool = True) -> AbstractUser:
    """Put a user in exactly one role group. Admins also get Django admin access."""
    role_groups_sync()
    before = user_role(user) if _audit and user.pk else None
    with audit_context.quiet():
        user.groups.remove(*Group.objects.filter(name__in=[r.value for r in Role]))
        user.groups.add(Group.objects.get(name=role.value))
        user.is_staff = role is Role.ADMIN
        user.is_superuser = role is Role.ADMIN
        user.save(update_fields=["is_staff", "is_superuser"])
    if _audit and before is not role:
        audit.record("user.role", user, before={"role": before and before.value},
                     after={"role": role.value})  # fmt: skip
    return user


def generate_password() -> str:
    return secrets.token_urlsafe(12)


@transaction.atomic
def user_create(
    *, username: str, role: Role, password: str | None = None, email: str = ""
) -> tuple[AbstractUser, str]:
    """Create a user with a role; returns the user and the password in clear text.

    A password given by the caller is checked by the project's password validators; a
    generated one is random. Raises ValueError if the username is taken and
    ValidationError for a weak password.
    """
    user_model = get_user_model()
    if user_model.objects.filter(username=username).exists():
        raise ValueError(f"user {username!r} already exists")
    user = user_model(username=username, email=email)
    clear = password if password is not None else generate_password()
    validate_password(clear, user)
    user.set_password(clear)
    with audit_context.quiet():
        user.save()
    user_set_role(user=user, role=role, _audit=False)
    audit.record("user.create", user, after={"username": username, "role": role.value})
    return user, clear

"""Writes that concern users and roles."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.db import models, transaction

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
    *,
    username: str,
    role: Role,
    password: str | None = None,
    email: str = "",
    password_link: bool = False,
) -> tuple[AbstractUser, str]:
    """Create a user with a role; returns the user and the password in clear text.

    A password given by the caller is checked by the project's password validators; a
    generated one is random; with `password_link` there is none ("" is returned) until the
    person sets one through a set-password link. Raises ValueError if the username is taken
    and ValidationError for a weak password.
    """
    user_model = get_user_model()
    if user_model.objects.filter(username__iexact=username).exists():
        raise ValueError(f"user {username!r} already exists")
    user = user_model(username=username, email=email)
    if password_link:
        clear = ""
        user.set_unusable_password()
    else:
        clear = password if password is not None else generate_password()
        validate_password(clear, user)
        user.set_password(clear)
    with audit_context.quiet():
        user.save()
    user_set_role(user=user, role=role, _audit=False)
    audit.record("user.create", user, after={"username": username, "role": role.value})
    return user, clear


# --- team administration (the Users page, apps/accounts/users.py) ---------------------------


class UserRefused(Exception):
    """An admin's change that would lock the team out (the message says why)."""


def active_admins():
    return (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(models.Q(is_superuser=True) | models.Q(groups__name=Role.ADMIN.value))
        .distinct()
    )


def _keeps_an_admin(user: AbstractUser) -> None:
    """The last active admin cannot be demoted or deactivated: nobody could undo it."""
    if user_role(user) is Role.ADMIN and not active_admins().exclude(pk=user.pk).exists():
        raise UserRefused(
            f"{user.get_username()} is the last active admin: make someone else an admin first."
        )


def user_sessions_end(user: AbstractUser) -> int:
    """Delete the user's browser sessions (signed out everywhere); how many there were.
    Session data is opaque to SQL, so each unexpired row is decoded (a team's few hundred)."""
    from django.contrib.sessions.models import Session
    from django.utils import timezone

    mine = [
        s.pk
        for s in Session.objects.filter(expire_date__gt=timezone.now()).iterator()
        if str(s.get_decoded().get("_auth_user_id")) == str(user.pk)
    ]
    Session.objects.filter(pk__in=mine).delete()
    return len(mine)


def user_revoke_credentials(user: AbstractUser) -> tuple[str, list[str]]:
    """Every API token and gateway key of the user, through the apps that own them
    (apps/accounts/signals.py: accounts imports neither). Returns what went ("2 API tokens,
    1 gateway key", in the nouns' order whichever app answered first; "none held") and the
    problems of receivers that failed. Used by Deactivate and the password page."""
    from apps.accounts.signals import revoke_credentials

    revoked, problems = [], []
    for _receiver, answer in revoke_credentials.send_robust(sender=get_user_model(), user=user):
        if isinstance(answer, Exception):
            problems.append(str(answer))
        elif answer:
            revoked.append(answer)
    return ", ".join(sorted(revoked, key=lambda w: w.split(" ", 1)[-1])) or "none held", problems


@transaction.atomic
def user_change_role(*, user: AbstractUser, role: Role) -> AbstractUser:
    """An admin's role change (audited by `user_set_role`); never the last admin's."""
    if role is not Role.ADMIN:
        _keeps_an_admin(user)
    return user_set_role(user=user, role=role)


def user_deactivate(*, user: AbstractUser, by: AbstractUser) -> tuple[str, list[str]]:
    """The account can no longer sign in: its sessions end, its open sockets close
    (apps/accounts/revoke.py), its API tokens and gateway keys are revoked; one audit row
    says what went. Returns (what was revoked, problems)."""
    if user.pk == by.pk:
        raise UserRefused("You cannot deactivate your own account.")
    _keeps_an_admin(user)
    with transaction.atomic():
        with audit_context.quiet():
            user.is_active = False
            user.save(update_fields=["is_active"])
        sessions = user_sessions_end(user)
    what, problems = user_revoke_credentials(user)
    audit.record("user.deactivate", user, label=user.get_username(),
                 message=f"{sessions} session(s) signed out; revoked: {what}")  # fmt: skip
    return what, problems


@transaction.atomic
def user_reactivate(*, user: AbstractUser) -> None:
    with audit_context.quiet():
        user.is_active = True
        user.save(update_fields=["is_active"])
    audit.record("user.reactivate", user, label=user.get_username(),
                 message="may sign in again (revoked tokens and keys stay revoked)")  # fmt: skip


@transaction.atomic
def user_reset_password(*, user: AbstractUser, link: bool) -> str:
    """A new random password (returned, for the admin to hand over once) or, with `link`,
    no usable password until the person sets one through a set-password link. Either way
    their sessions end; tokens and keys keep working (the Users page's Deactivate revokes
    them)."""
    clear = ""
    with audit_context.quiet():
        if link:
            user.set_unusable_password()
        else:
            clear = generate_password()
            user.set_password(clear)
        user.save(update_fields=["password"])
    sessions = user_sessions_end(user)
    how = "a set-password link" if link else "a new random password"
    audit.record("user.password-reset", user, label=user.get_username(),
                 message=f"{how}; {sessions} session(s) signed out")  # fmt: skip
    return clear

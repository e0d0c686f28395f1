"""The three roles and what each may do.

Roles are Django groups holding permissions; views and consumers check permissions
(`user.has_perm(...)`), never group names, so an admin can grant one capability to one
person in Django admin without inventing a fourth role.
"""

from __future__ import annotations

from enum import StrEnum

APP_LABEL = "accounts"


class Role(StrEnum):
    ADMIN = "admin"
    OPERATOR = "operator"
    MEMBER = "member"

    @property
    def label(self) -> str:
        return self.value.capitalize()


# codename -> description; the permission rows hang off accounts.Capability.
CAPABILITIES: dict[str, str] = {
    "view_panel": "Can view the panel (dashboard, recipes, runs, results)",
    "queue_benchmarks": "Can queue and cancel own benchmark jobs",
    "use_chat": "Can chat with a running model",
    "operate_runs": "Can start and stop runs",
    "edit_recipes": "Can create, edit and import recipes",
    "post_notices": "Can post team notices",
    "manage_hosts": "Can add and edit hosts",
    "manage_users": "Can manage users and roles",
}

_MEMBER = {"view_panel", "queue_benchmarks", "use_chat"}
_OPERATOR = _MEMBER | {"operate_runs", "edit_recipes", "post_notices"}
_ADMIN = set(CAPABILITIES)

ROLE_CAPABILITIES: dict[Role, frozenset[str]] = {
    Role.MEMBER: frozenset(_MEMBER),
    Role.OPERATOR: frozenset(_OPERATOR),
    Role.ADMIN: frozenset(_ADMIN),
}

# Highest first: a user in two role groups is described by the stronger one.
ROLE_ORDER = (Role.ADMIN, Role.OPERATOR, Role.MEMBER)


def perm(codename: str) -> str:
    """The full permission name for a capability, e.g. 'accounts.operate_runs'."""
    if codename not in CAPABILITIES:
        raise KeyError(f"unknown capability {codename!r}")
    return f"{APP_LABEL}.{codename}"


VIEW_PANEL = perm("view_panel")
QUEUE_BENCHMARKS = perm("queue_benchmarks")
USE_CHAT = perm("use_chat")
OPERATE_RUNS = perm("operate_runs")
EDIT_RECIPES = perm("edit_recipes")
POST_NOTICES = perm("post_notices")
MANAGE_HOSTS = perm("manage_hosts")
MANAGE_USERS = perm("manage_users")

from apps.accounts.roles import (
    EDIT_RECIPES,
    MANAGE_HOSTS,
    MANAGE_USERS,
    OPERATE_RUNS,
    POST_NOTICES,
    QUEUE_BENCHMARKS,
    USE_CHAT,
)
from apps.accounts.services import user_role


def role(request):
    """The user's role and the capabilities templates use to show or hide controls.

    Hiding is only cosmetic: every view checks the permission again on the server.
    """
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"user_role": None}
    return {
        "user_role": user_role(user),
        "can": {
            "operate_runs": user.has_perm(OPERATE_RUNS),
            "edit_recipes": user.has_perm(EDIT_RECIPES),
            "post_notices": user.has_perm(POST_NOTICES),
            "manage_hosts": user.has_perm(MANAGE_HOSTS),
            "manage_users": user.has_perm(MANAGE_USERS),
            "queue_benchmarks": user.has_perm(QUEUE_BENCHMARKS),
            "use_chat": user.has_perm(USE_CHAT),
        },
    }

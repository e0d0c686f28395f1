from django.shortcuts import render

from apps.accounts.roles import VIEW_PANEL

# Views a logged-in account without a role may still reach (to sign out, or to be told why).
_ALWAYS_ALLOWED = {"logout"}


class RoleRequiredMiddleware:
    """A logged-in account with no role gets an explanation (403), not the panel.

    Runs after LoginRequiredMiddleware, so anonymous users were already sent to the
    login page; views marked @login_not_required (login, health check) stay open.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if not getattr(view_func, "login_required", True):
            return None
        user = request.user
        if not user.is_authenticated or user.has_perm(VIEW_PANEL):
            return None
        match = getattr(request, "resolver_match", None)
        if match is not None and match.url_name in _ALWAYS_ALLOWED:
            return None
        return render(request, "accounts/no_role.html", status=403)

"""Team notices: expiry, deletion (author, operators, admins; others 403), the length cap."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from apps.core.forms import NoticeForm, expiry_time
from apps.core.models import Notice

pytestmark = pytest.mark.django_db


def post(client, message="Spark-1 down at 14:00", headers=None, **extra):
    return client.post(
        "/notices/", {"message": message, "level": "info", **extra}, headers=headers or {}
    )


def test_current_leaves_out_expired_notices_and_recent_follows_it(operator):
    now = timezone.now()
    gone = Notice.objects.create(
        author=operator, message="old", expires_at=now - dt.timedelta(seconds=1)
    )
    later = Notice.objects.create(
        author=operator, message="soon", expires_at=now + dt.timedelta(hours=1)
    )
    forever = Notice.objects.create(author=operator, message="forever")
    assert list(Notice.objects.current()) == [forever, later]
    assert gone not in list(Notice.objects.recent())
    assert gone.expired and not later.expired and not forever.expired
    # At a later moment the hour-long one is gone too.
    assert list(Notice.objects.current(now=now + dt.timedelta(hours=2))) == [forever]


@pytest.mark.parametrize(
    ("choice", "low", "high"),
    [("1h", dt.timedelta(minutes=59), dt.timedelta(minutes=61)),
     ("week", dt.timedelta(days=6.99), dt.timedelta(days=7.01)),
     ("today", dt.timedelta(0), dt.timedelta(hours=24))],
)  # fmt: skip
def test_expiry_choices(choice, low, high):
    now = timezone.now()
    until = expiry_time(choice, now)
    assert low < until - now <= high
    if choice == "today":
        local = timezone.localtime(until)
        assert (local.hour, local.minute, local.second) == (0, 0, 0)
    assert expiry_time("never", now) is None


def test_posting_with_an_expiry_stores_it_and_the_dashboard_hides_it_once_expired(
    operator, client_as, redis_url
):
    client = client_as(operator)
    assert post(client, "for an hour", expires="1h").status_code == 302
    notice = Notice.objects.get(message="for an hour")
    assert notice.expires_at is not None
    assert "for an hour" in client.get("/").content.decode()
    Notice.objects.filter(pk=notice.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert "for an hour" not in client.get("/").content.decode()


def test_an_unknown_expiry_is_a_clear_error_not_a_500(operator, client_as, redis_url):
    response = post(client_as(operator), expires="forever-and-ever", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert "Choose how long the notice is shown." in response.content.decode()
    assert not Notice.objects.exists()


def test_a_too_long_notice_is_refused_with_its_length():
    form = NoticeForm({"message": "x" * 5000, "level": "info", "expires": "never"})
    assert not form.is_valid()
    assert "at most 280 characters (this one has 5000)" in form.errors["message"][0]


def test_the_author_an_operator_and_an_admin_may_delete_others_get_403(
    operator, admin_user, member, client_as, redis_url
):
    mine = Notice.objects.create(author=member, message="a member's (posted by an admin for her)")
    other = Notice.objects.create(author=operator, message="by otto")
    # A member may delete her own notice, not someone else's.
    member_client = client_as(member)
    assert member_client.post(f"/notices/{other.pk}/delete/").status_code == 403
    assert Notice.objects.filter(pk=other.pk).exists()
    assert member_client.post(f"/notices/{mine.pk}/delete/").status_code == 302
    assert not Notice.objects.filter(pk=mine.pk).exists()
    # Operators and admins may delete any notice.
    third = Notice.objects.create(author=admin_user, message="by ada")
    assert client_as(operator).post(f"/notices/{third.pk}/delete/").status_code == 302
    assert client_as(admin_user).post(f"/notices/{other.pk}/delete/").status_code == 302
    assert not Notice.objects.exists()
    # GET does not delete, and an unknown notice is a 404.
    assert client_as(operator).get("/notices/999/delete/").status_code == 405
    assert client_as(operator).post("/notices/999/delete/").status_code == 404


def test_delete_buttons_show_only_for_those_who_may_delete(operator, member, client_as, redis_url):
    notice = Notice.objects.create(author=operator, message="by otto")
    url = f"/notices/{notice.pk}/delete/"
    assert url in client_as(operator).get("/").content.decode()
    assert url not in client_as(member).get("/").content.decode()


def test_deleting_pushes_the_change_to_open_pages(
    operator, client_as, redis_url, monkeypatch, django_capture_on_commit_callbacks
):
    """Deleting takes the notice off every open page: through the live-state module's
    push_notices where it exists, else by pushing an empty item with the same id."""
    import importlib

    pushed: list = []
    try:
        live = importlib.import_module("apps.core.live")
    except ImportError:
        live = None
    if live is not None and hasattr(live, "push_notices"):
        monkeypatch.setattr(live, "push_notices", lambda *a, **kw: pushed.append("notices"))
    else:
        monkeypatch.setattr("apps.core.services.fragment_push", lambda **kw: pushed.append(kw))
    notice = Notice.objects.create(author=operator, message="bye")
    with django_capture_on_commit_callbacks(execute=True):
        response = client_as(operator).post(f"/notices/{notice.pk}/delete/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert len(pushed) == 1
    if pushed[0] != "notices":
        assert f'id="notice-{notice.pk}"' in pushed[0]["html"] and "hidden" in pushed[0]["html"]

"""Every page names a favicon that is really served (no 404 on every page load)."""

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

ICON = re.compile(r'<link rel="icon" href="([^"]+)"')


def test_pages_link_a_favicon_that_is_served(member, client_as):
    pages = [Client().get("/accounts/login/"), client_as(member).get("/"),
             client_as(member).get("/no-such-page/")]  # fmt: skip
    hrefs = {ICON.search(page.content.decode()).group(1) for page in pages}
    assert len(hrefs) == 1
    (href,) = hrefs
    icon = Client().get(href)  # static files need no login
    assert icon.status_code == 200
    assert b"<svg" in b"".join(icon.streaming_content if icon.streaming else [icon.content])

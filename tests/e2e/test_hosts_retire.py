"""Hosts in Chromium (issue 43, Hosts): an admin retires an idle Spark from its page and the
Runs page's start form stops offering it (the Hosts page lists it apart; bringing it back
offers it again); a Spark whose host agent went silent shows its last memory figures
marked stale, with their age, on the Hosts page and its own page."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e

HOST_SETUP = """
from datetime import timedelta
from django.utils import timezone
from apps.hosts.models import Host
Host.objects.update_or_create(name="{name}", defaults=dict(
    engine="process", simulated=True, sim_time_scale=40, port_min=29900, port_max=29909,
    description="{description}"))
if {silent_minutes}:
    Host.objects.filter(name="{name}").update(
        agent_seen_at=timezone.now() - timedelta(minutes={silent_minutes}, seconds=5),
        agent_sample={{"mem_total": 128 * 10**9, "mem_available": 20 * 10**9, "mem_level": "ok"}})
"""


def _host(server, prefix: str, description: str, silent_minutes: int = 0) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    server.manage("shell", "-c", HOST_SETUP.format(name=name, description=description,
                                                   silent_minutes=silent_minutes))  # fmt: skip
    return name


def _start_options(page):
    return page.locator("#start-form select[name=host] option")


def test_an_admin_retires_an_idle_host_and_the_start_form_no_longer_offers_it(
    new_page, live_server_asgi
):
    name = _host(live_server_asgi, "old-spark", "a Spark leaving the team")
    page = new_page()
    login(page, "ada")
    page.goto("/runs/")
    expect(_start_options(page).filter(has_text=name)).to_have_count(1)

    page.goto("/hosts/")
    page.get_by_role("link", name=name, exact=True).click()
    page.get_by_role("button", name=f"Retire {name}").click()
    expect(page.get_by_text(f"{name} is retired: the start and queue forms")).to_be_visible()
    expect(page.get_by_test_id("host-retired")).to_have_text("Retired")
    expect(page.get_by_role("button", name="Bring back into service")).to_be_visible()

    page.goto("/runs/")
    expect(_start_options(page).filter(has_text="local-sim")).not_to_have_count(0)
    expect(_start_options(page).filter(has_text=name)).to_have_count(0)
    # Its runs stay findable: the list's host filter still names it.
    expect(page.locator(f'form.filters select[name=host] option[value="{name}"]')).to_have_count(1)

    page.goto("/hosts/")
    retired = page.locator("#retired-hosts")
    expect(retired.locator(f'[data-retired-host="{name}"]')).to_be_hidden()  # collapsed
    retired.locator("summary").click()
    expect(retired.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(page.locator("table").first.get_by_role("link", name=name, exact=True)).to_have_count(0)

    retired.get_by_role("link", name=name, exact=True).click()
    page.get_by_role("button", name="Bring back into service").click()
    expect(page.get_by_text(f"{name} is back in service.")).to_be_visible()
    page.goto("/runs/")
    expect(_start_options(page).filter(has_text=name)).to_have_count(1)


def test_a_host_whose_agent_went_silent_shows_its_last_figures_as_stale(new_page, live_server_asgi):
    name = _host(live_server_asgi, "quiet-spark", "its host agent stopped", silent_minutes=6)
    age = re.compile(r"as of [67] min ago — the host agent is silent")
    page = new_page()
    login(page, "mia")
    page.goto("/hosts/")
    cell = page.get_by_test_id(f"host-memory-{name}")
    expect(cell).to_contain_text("20.0 GB available of 128")
    expect(cell.locator(".state-stale")).to_have_text(age)
    expect(cell).to_have_attribute("data-stale", "")
    page.get_by_role("link", name=name, exact=True).click()
    memory = page.locator("#host-memory")
    expect(memory.locator("[data-stale]")).to_contain_text("20.0 GB available")
    expect(memory.locator(".state-stale")).to_have_text(age)
    expect(memory).to_contain_text("Not the memory now")
    expect(memory.get_by_test_id("startable-now")).to_have_count(0)

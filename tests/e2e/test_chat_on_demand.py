"""A member opens a chat with an on-demand model nobody has loaded (issue #42): the page
shows the load with its progress, takes the message typed meanwhile, and sends it once the
model is ready; the answer streams in. The load is real: the Spark's own Celery worker
starts sparksim."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import host_processes, login
from tests.isolation import PORT_SHIFT

pytestmark = pytest.mark.e2e

HOST = "ondemand-sim"
NAME = "qwen-on-demand-chat"
SETUP = f"""
from apps.gateway.models import OnDemand
from apps.hosts.models import Host
from apps.recipes.models import Recipe
host, _ = Host.objects.update_or_create(name="{HOST}", defaults=dict(
    engine="process", simulated=True, sim_time_scale=20, port_min={21900 + PORT_SHIFT},
    port_max={21999 + PORT_SHIFT}, description="a Spark for on-demand models"))
recipe = Recipe.objects.filter(slug="{NAME}").first()
if recipe is None:
    recipe = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
    recipe.pk = None
    recipe.id = None
    recipe.name, recipe.slug, recipe.served_model_name = "Qwen on demand", "{NAME}", "{NAME}"
    recipe.save()
entry, _ = OnDemand.objects.get_or_create(recipe=recipe)
entry.hosts.set([host])
"""
STOP = f"""
from apps.runs.models import Run
from apps.runs.services import run_stop
for run in Run.objects.active().filter(host__name="{HOST}"):
    run_stop(run=run)
"""


@pytest.fixture
def on_demand_host(live_server_asgi):
    server = live_server_asgi
    server.manage("shell", "-c", SETUP)
    with host_processes(server, HOST):
        try:
            yield server
        finally:
            server.manage("shell", "-c", STOP)


@pytest.mark.timeout(300)
def test_a_member_opens_a_chat_on_an_unloaded_model_sees_it_load_and_gets_the_answer(
    new_page, on_demand_host
):
    page = new_page()
    login(page, "mia")
    page.get_by_role("link", name="Chat", exact=True).click()
    choice = page.locator("#on-demand-chat select[name=recipe]")
    expect(choice.locator("option", has_text=NAME)).to_contain_text(f"can load on {HOST}")
    choice.select_option(label=choice.locator("option", has_text=NAME).inner_text())
    page.get_by_role("button", name="Load and chat").click()

    # The load panel: where the load stands, moving; the message waits in the box.
    panel = page.locator("#chat-load")
    expect(panel).to_contain_text(f"loading model {NAME} on {HOST}", timeout=15_000)
    # The page's script is up and its socket open (a busy machine runs deferred scripts late).
    expect(page.locator("[data-chat-state]")).to_have_text("waiting for the model…",
                                                           timeout=30_000)  # fmt: skip
    box = page.get_by_label("Message")
    box.fill("/sparksim echo hello from the queue")
    page.get_by_role("button", name="Send").click()
    expect(panel.locator("[data-load-queued]")).to_be_visible()
    seen = set()
    for _ in range(600):
        text = panel.locator("[data-load-message]").inner_text()
        seen.add(text)
        if panel.get_attribute("data-state") == "ready":
            break
        page.wait_for_timeout(200)
    assert panel.get_attribute("data-state") == "ready", seen
    assert len(seen) >= 3, seen  # the steps of the start went by: queued, loading, …
    assert any("%" in text or "min" in text for text in seen), seen

    # Ready: the waiting message went, and its answer streams in.
    answer = page.locator(".chat-assistant").last
    expect(answer.locator("[data-content]")).to_have_text("hello from the queue", timeout=30_000)
    expect(page.locator(".chat-user").last).to_contain_text("hello from the queue")
    expect(box).to_have_value("")
    expect(page.locator("[data-chat-state]")).to_have_text("ready", timeout=10_000)
    run_state = page.get_by_test_id("chat-run-state")  # the run it loaded, followed live
    expect(run_state).to_have_text("ready")

    # The model's run stops (an idle unload, an operator): the open page says so and its
    # load panel comes back by itself, polling again; a message sent now waits for a load.
    on_demand_host.manage("shell", "-c", STOP)
    expect(run_state).to_have_text(re.compile(r"^(stopping|stopped)$"), timeout=15_000)
    expect(panel).to_be_visible()
    expect(panel).not_to_have_attribute("data-state", "ready", timeout=15_000)
    expect(page.locator("[data-chat-state]")).to_have_text("waiting for the model…")
    expect(page.get_by_role("button", name="Send")).to_be_enabled()

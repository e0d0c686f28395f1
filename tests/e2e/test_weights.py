"""A first start's download in a real browser: the run page's download bar moves with the
bytes, rate and files while the host's own worker fetches the weights from a local hub
(hubsim, with the real huggingface_hub client), and the Hosts page and the host's model
cache page then show what the Spark holds and the disk left."""

import re

import pytest
from playwright.sync_api import expect

from hubsim import store
from sparkdomain.presets import RECIPES
from tests.conftest import wait_for
from tests.e2e.conftest import host_processes, login
from tests.isolation import PORT_SHIFT

pytestmark = pytest.mark.e2e

HOST = "dl-sim"
SLUG = "qwen3-5-35b-max-single-user"
MODEL = next(r for r in RECIPES if r["slug"] == SLUG)["model_id"]
MIB = 1024 * 1024
START = f"""
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.services import run_start
recipe = Recipe.objects.get(slug="{SLUG}")
print(run_start(recipe=recipe, host=Host.objects.get(name="{HOST}"), user=None).pk)
"""
STOP = f"""
from apps.runs.models import Run
from apps.runs.services import run_stop
for run in Run.objects.active().filter(host__name="{HOST}"):
    run_stop(run=run)
"""


def test_the_download_bar_moves_then_the_hosts_page_shows_the_cached_model(
    new_page, live_server_asgi, hub, tmp_path
):
    setup = f"""
from apps.hosts.models import Host
Host.objects.update_or_create(name="{HOST}", defaults=dict(
    engine="process", simulated=True, sim_time_scale=40, port_min={21700 + PORT_SHIFT}, port_max={21799 + PORT_SHIFT},
    hf_cache_path="{tmp_path / "dl-hf"}", description="a simulated Spark with a cache"))
"""
    (tmp_path / "dl-hf").mkdir()
    live_server_asgi.manage("shell", "-c", setup)
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    store.publish(hub.root, MODEL, {
        shards[0]: 96 * MIB, shards[1]: 64 * MIB, "config.json": b"{}",
        "tokenizer.json": b'{"v": 1}',
        "model.safetensors.index.json": b'{"weight_map": {"a": "%s", "b": "%s"}}'
        % (shards[0].encode(), shards[1].encode()),
    })  # fmt: skip
    hub.faults(rate=20 * MIB)  # about 8 s of downloading
    worker_env = {"HF_ENDPOINT": hub.url, "WEIGHTS_DISK_RESERVE_GB": "0"}
    with host_processes(live_server_asgi, HOST, worker_env=worker_env):
        try:
            page = new_page()
            login(page, "otto")
            run_id = live_server_asgi.manage("shell", "-c", START).strip().splitlines()[-1]
            page.goto(f"/runs/{run_id}/")
            progress = page.locator(f"#run-{run_id}-progress")
            expect(progress.locator(".state-badge")).to_have_text("Downloading weights",
                                                                  timeout=30_000)  # fmt: skip
            bytes_line = progress.get_by_test_id("download-bytes")
            seen = []

            def moved() -> bool:
                if bytes_line.count():
                    seen.append(bytes_line.first.inner_text())
                return len(set(seen)) >= 3

            wait_for(moved, 30, f"the download bar moving ({seen[-3:]})")
            assert re.search(r"MB of 167\.8 MB", seen[-1]), seen[-1]  # 160 MiB and the rest
            bar = progress.locator(".download [role=progressbar]").first
            assert 0 < int(bar.get_attribute("aria-valuenow") or 0) < 100
            expect(progress.locator(".download")).to_contain_text("/s")
            expect(progress.locator(".state-badge")).to_have_text("Ready", timeout=90_000)
            details = page.get_by_test_id("run-weights")
            expect(details).to_contain_text(MODEL)
            expect(details).to_contain_text("downloaded")

            page.goto("/hosts/")
            cell = page.get_by_test_id(f"host-cache-{HOST}")
            expect(cell).to_contain_text(MODEL)
            expect(cell).to_contain_text("free")
            cell.get_by_role("link", name=re.compile("Model cache")).click()
            row = page.get_by_test_id(f"cached-{MODEL}")
            expect(row).to_contain_text("167.8 MB")  # on disk
            expect(row).to_contain_text("in use: run")  # the ready run serves it
            expect(page.get_by_test_id("cache-free")).to_contain_text("free")
        finally:
            live_server_asgi.manage("shell", "-c", STOP)

"""Hostile text in recipe names, descriptions, model ids, host descriptions, team notices,
run steps and log lines, and benchmark notes and errors renders as inert text in a real
browser: no script runs, no element is injected, the text itself is visible.

(Chat output is covered by test_chat.py.)
"""

import json

import pytest

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e

PAYLOADS = [
    '<img src=x onerror="window.__pwned=1">',
    "<script>window.__pwned=2</script>",
    '"><svg onload="window.__pwned=3">',
    "</script><script>window.__pwned=4</script>",
    "javascript:window.__pwned=5",
]
HOSTILE = " ".join(PAYLOADS)

SEED = """
import json
from apps.benchmarks.models import Job, Suite
from apps.core.models import Notice
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run
h = json.loads({hostile!r})
host = Host.objects.get(name="local-sim")
host.description = h
host.save(update_fields=["description"])
recipe = Recipe.objects.create(name="xss " + h[:80], slug="xss-recipe", description=h,
    model_id="org/model", gpu_memory_utilization="0.5", max_model_len=4096)
Recipe.objects.filter(pk=recipe.pk).update(model_id=h[:200])  # validators refuse it: force it
run = Run.objects.create(recipe=recipe, host=host, port=65000, image="img", state="failed",
    step=h[:200], failure_reason=h, failure_advice=h, failure_log=h, log_tail=h)
Notice.objects.create(message="xss " + h[:400], level="warning")
suite = Suite.objects.first()
job = Job.objects.create(suite=suite, recipe=recipe, host=host, note=h[:200], error=h,
    state="failed", plan={{"name": h[:80], "scenarios": [], "sweep": {{}}, "slo": {{}}}})
print(json.dumps({{"run": run.pk, "job": job.pk}}))
"""

CLEANUP = """
from apps.benchmarks.models import Job
from apps.core.models import Notice
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run
Job.objects.filter(recipe__slug="xss-recipe").delete()
Run.objects.filter(recipe__slug="xss-recipe").delete()
Recipe.objects.filter(slug="xss-recipe").delete()
Notice.objects.filter(message__startswith="xss ").delete()
Host.objects.filter(name="local-sim").update(description="")
"""


@pytest.fixture
def hostile(live_server_asgi):
    out = live_server_asgi.manage("shell", "-c", SEED.format(hostile=json.dumps(HOSTILE)))
    ids = json.loads(out.strip().splitlines()[-1])
    try:
        yield ids
    finally:
        live_server_asgi.manage("shell", "-c", CLEANUP)


def test_hostile_text_renders_inert_on_every_page(new_page, hostile):
    page = new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    login(page, "otto")
    pages = ["/", "/recipes/", "/recipes/xss-recipe/", "/runs/", f"/runs/{hostile['run']}/",
             "/hosts/", "/hosts/local-sim/", "/benchmarks/",
             f"/benchmarks/jobs/{hostile['job']}/"]  # fmt: skip
    for path in pages:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.__pwned") is None, path
        # Nothing the payloads would create exists in the document…
        injected = page.evaluate(
            """() => [...document.querySelectorAll('img[src="x"], svg[onload], [onerror], '
                   + '[onload], a[href^="javascript"]')].length"""
        )
        assert injected == 0, path
        inline = page.evaluate(
            "() => [...document.scripts].filter(s => s.textContent.includes('__pwned')"
            " && s.type !== 'application/json').length"
        )
        assert inline == 0, path
        # …and the hostile text is shown as text.
        assert "<script>window.__pwned=2</script>" in page.inner_text("body"), path
    assert dialogs == []

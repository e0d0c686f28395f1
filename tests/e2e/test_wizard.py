"""The config wizard in a real browser: live re-planning, the 0.90 rule, and saving."""

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e


def _open_wizard(page):
    page.get_by_role("link", name="Recipes", exact=True).click()
    page.get_by_role("link", name="Plan a recipe (wizard)").click()
    expect(page.locator(".steps li.current")).to_have_text("1. Model")


def test_member_sees_does_not_fit_fixes_it_and_cannot_save(new_page):
    page = new_page()
    login(page, "mia")
    _open_wizard(page)
    page.get_by_role("button", name="Llama-3.3-70B-Instruct (NVFP4, dense)").click()
    expect(page.get_by_label("Model", exact=True)).to_have_value(
        "nvidia/Llama-3.3-70B-Instruct-FP4"
    )
    expect(page.get_by_label("Layers", exact=True)).to_have_value("80")
    page.get_by_role("button", name="Next →").click()
    expect(page.locator(".steps li.current")).to_have_text("2. Workload")

    verdict = page.locator("#plan-preview .verdict")
    page.get_by_label("Max model len (context per user, tokens)").fill("262144")
    page.get_by_label("Max num seqs (users served at once)").fill("10")
    page.get_by_label("KV cache dtype").select_option("auto")
    expect(verdict).to_have_text("Does not fit")
    expect(page.locator("#plan-preview .warning-sequence-exceeds-kv")).to_be_visible()

    # The browser will not go above 0.90, and the server says why if asked anyway.
    util = page.get_by_label("GPU memory utilization")
    expect(util).to_have_attribute("max", "0.90")
    util.fill("0.95")
    expect(page.locator("#plan-preview")).to_contain_text("freezes the whole machine")
    util.fill("0.85")

    page.get_by_label("Max model len (context per user, tokens)").fill("4096")
    page.get_by_label("KV cache dtype").select_option("fp8")
    expect(verdict).to_have_text("Fits")
    expect(page.locator("#plan-preview .budget .seg-weights")).to_be_visible()

    page.get_by_role("button", name="Next →").click()
    expect(page.locator(".steps li.current")).to_have_text("3. Review and save")
    command = page.locator("pre.command").first
    expect(command).to_contain_text("--gpu-memory-utilization 0.85 \\\n  --max-model-len 4096")
    # One option per line, never broken inside one; the Copy button copies it whole.
    assert command.evaluate("e => getComputedStyle(e).whiteSpace") == "pre"
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.locator(".command-box").first.get_by_role("button", name="Copy the command").click()
    expect(page.locator(".command-box").first.locator("[data-copy]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == command.inner_text()
    expect(page.locator("#save-hint")).to_contain_text("Only operators and admins can save")
    expect(page.get_by_role("button", name="Save recipe")).to_have_count(0)


def test_operator_saves_a_recipe_from_the_wizard(new_page):
    page = new_page()
    login(page, "otto")
    _open_wizard(page)
    page.get_by_role("button", name="Llama-3.3-70B-Instruct (NVFP4, dense)").click()
    expect(page.get_by_label("Model", exact=True)).to_have_value(
        "nvidia/Llama-3.3-70B-Instruct-FP4"
    )
    page.get_by_role("button", name="Next →").click()
    page.get_by_role("button", name="70B dense, 5 users").click()
    expect(page.get_by_label("Max model len (context per user, tokens)")).to_have_value("4096")
    expect(page.locator("#plan-preview .verdict")).to_have_text("Fits")
    page.get_by_role("button", name="Next →").click()
    expect(page.locator(".steps li.current")).to_have_text("3. Review and save")
    page.get_by_label("Name").fill("Team 70B from the wizard")
    page.get_by_role("button", name="Save recipe").click()
    expect(page.get_by_role("heading", name="Team 70B from the wizard")).to_be_visible()
    expect(page.locator("#serve-command")).to_contain_text(
        "vllm serve nvidia/Llama-3.3-70B-Instruct-FP4 \\\n  --gpu-memory-utilization 0.85 \\\n"
        "  --max-model-len 4096 \\\n  --max-num-seqs 5"
    )
    expect(page.locator(".msg-success")).to_contain_text("saved from the wizard")


def test_operator_edits_a_recipe_with_a_live_plan_and_sees_the_new_command(new_page):
    page = new_page()
    login(page, "otto")
    page.get_by_role("link", name="Recipes", exact=True).click()
    page.get_by_role("link", name="70B dense — max concurrent users").click()
    expect(page.locator("#serve-command")).to_contain_text("--max-num-seqs 10")
    page.get_by_role("link", name="Edit").click()
    verdict = page.locator("#plan-preview .verdict")
    expect(verdict).to_have_text("Fits")
    page.get_by_label("Max model len (context per user, tokens)").fill("131072")
    expect(verdict).to_have_text("Does not fit")
    page.get_by_label("Max model len (context per user, tokens)").fill("8192")
    page.get_by_label("Max num seqs (users served at once)").fill("6")
    expect(verdict).to_have_text("Fits")
    page.get_by_role("button", name="Save recipe").click()
    expect(page.locator(".msg-success")).to_contain_text("saved")
    expect(page.locator("#serve-command")).to_contain_text(
        "--max-model-len 8192 \\\n  --max-num-seqs 6"
    )


def test_the_wizard_says_when_the_slo_not_memory_will_be_the_limit(new_page):
    """One capacity story while planning: memory, --max-num-seqs and the latency estimate,
    the one that binds marked, re-planned live as the workload changes (issue 43)."""
    page = new_page()
    login(page, "mia")
    _open_wizard(page)
    page.get_by_role("button", name="Qwen3.5-35B-A3B (NVFP4, linear-attention MoE)").click()
    page.get_by_role("button", name="Next →").click()
    page.get_by_role("button", name="35B MoE, 5 users, 8K context").click()
    story = page.locator("#plan-preview #capacity-story")
    expect(story).to_have_attribute("data-binding", "scheduler")
    expect(story.locator(".capacity-headline")).to_contain_text(
        "--max-num-seqs is the limit: 5 users at once."
    )
    expect(story.locator("tr.binding th")).to_have_text("Scheduler")
    # Room for many more sequences, but not at 10 tok/s each: the SLO binds, said so.
    page.get_by_label("Max num seqs (users served at once)").fill("200")
    expect(story).to_have_attribute("data-binding", "latency")
    expect(story.locator(".capacity-headline")).to_contain_text(
        "The latency SLO, not memory, will be the limit"
    )
    expect(story.locator("tr.binding th")).to_have_text("Latency (SLO)")
    expect(story).to_contain_text("TTFT and prefill are only measured")
    # A dense 70B decodes under 10 tok/s even alone: no user meets it.
    page.get_by_role("button", name="← Back").click()
    page.get_by_role("button", name="Llama-3.3-70B-Instruct (NVFP4, dense)").click()
    expect(page.locator("#plan-preview #capacity-story .capacity-headline")).to_contain_text(
        "no user gets ≥ 10 tok/s each"
    )

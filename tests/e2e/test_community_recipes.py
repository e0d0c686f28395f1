"""Community recipes in a real browser (issue 39): an admin adds a sparkrun registry (a git
repository the test makes), an operator imports a recipe from it and sees where it came
from, what it asks for (a mod it will not run) and how to take it back to sparkrun."""

import subprocess

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e

RECIPE = """
recipe_version: "2"
model: Org/Browser-Moe-30B-A3B
runtime: vllm
container: vllm/vllm-openai:v0.33.0
maintainer: someone
metadata: {description: a MoE for the browser test, author: someone, tags: [moe, browser],
           model_params: 30B-A3B}
mods: [mods/fix-template]
env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"}
defaults: {port: 8000, host: 0.0.0.0, gpu_memory_utilization: 0.825, max_num_seqs: 4}
command: |
  vllm serve {model} --host {host} --port {port} \\
    --gpu-memory-utilization {gpu_memory_utilization} --max-num-seqs {max_num_seqs} \\
    --enable-auto-tool-choice --tool-call-parser hermes --load-format instanttensor
"""


def make_registry(path) -> None:
    (path / "recipes" / "moe").mkdir(parents=True)
    (path / "recipes" / "moe" / "browser-moe.yaml").write_text(RECIPE)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "HOME": str(path),
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org", "PATH": "/usr/bin:/bin"}  # fmt: skip
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env, capture_output=True)


def test_a_registry_recipe_is_imported_with_its_provenance_in_the_browser(new_page, tmp_path):
    make_registry(tmp_path / "team-registry")
    page = new_page()
    login(page, "ada")
    page.get_by_role("link", name="Recipes", exact=True).click()
    page.get_by_role("link", name="Registries").click()
    form = page.locator("#add-registry")
    form.get_by_label("Name").fill("browser-team")
    form.get_by_label("Git URL or local checkout").fill(str(tmp_path / "team-registry"))
    form.get_by_role("button", name="Add and fetch").click()
    expect(page.get_by_role("heading", name="browser-team")).to_be_visible()
    row = page.locator("#registry-recipes tr", has_text="browser-moe")
    expect(row).to_contain_text("Org/Browser-Moe-30B-A3B")
    expect(row).to_contain_text("a MoE for the browser test")
    row.get_by_role("button", name="Import").click()

    expect(page.get_by_role("heading", name="browser-moe")).to_be_visible()
    expect(page.locator(".msg-info").first).to_be_visible()  # the import's notes
    source = page.locator("#recipe-source")
    expect(source).to_contain_text("browser-team")
    expect(source).to_contain_text("recipes/moe/browser-moe.yaml")
    expect(source).to_contain_text("moe, browser")
    expect(page.locator("#recipe-mods")).to_contain_text("mods/fix-template")
    expect(page.locator("#recipe-mods")).to_contain_text("not added")  # no admin approved it
    # What vLLM will do: the panel has not read the model's config.json yet, and says how.
    expect(page.locator("#vllm-start")).to_contain_text("Not predicted yet")
    expect(page.locator("#vllm-start")).to_contain_text("spark plan")
    expect(page.locator("#recipe-env")).to_contain_text("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    command = page.locator("#serve-command")
    expect(command).to_contain_text("--gpu-memory-utilization 0.825")
    expect(command).to_contain_text("--enable-auto-tool-choice")
    expect(command).to_contain_text("--load-format instanttensor")
    expect(page.locator("#export-sparkrun")).to_have_attribute(
        "href", "/recipes/export/?slug=browser-moe&format=sparkrun"
    )

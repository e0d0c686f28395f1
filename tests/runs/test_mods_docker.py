"""Container mods on the real Docker engine (issue 39): a start applies the approved mod to
the image its server runs in; a failing mod fails the run with its output."""

from __future__ import annotations

import pytest

from apps.runs.mods import add_mod, approve
from tests.runs.test_mods import RUN

pytestmark = pytest.mark.services


@pytest.fixture(autouse=True)
def mod_folders(settings, tmp_path):
    settings.MOD_FOLDERS = [tmp_path]


@pytest.mark.django_db(transaction=True)
def test_a_start_applies_the_approved_mod_and_a_failing_one_fails_the_run(
    docker_sim_host, shell_image, qwen, operator, admin_user, tmp_path
):
    """The whole way, on the real Docker engine: approved → the run's server runs in the
    image the mod made (recorded on the run); a mod whose run.sh fails → the run fails
    with its output, and nothing is left running."""
    import docker

    from apps.runs import runner
    from apps.runs.models import Run, RunState
    from apps.runs.services import run_start

    docker_sim_host.sim_image = shell_image  # sparksim, in an image with a shell
    docker_sim_host.save()
    folder = tmp_path / "fix-template"
    folder.mkdir()
    (folder / "run.sh").write_text(RUN)
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    mod = add_mod(user=admin_user, folder=str(folder))
    approve(mod, user=admin_user, hosts=[docker_sim_host])
    qwen.mods = [{"kind": "mod", "name": "mods/fix-template"}]
    qwen.save()
    run = run_start(recipe=qwen, host=docker_sim_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY, (run.failure_reason, run.failure_log)
    assert run.facts["mods"] == [{"name": "fix-template", "digest": mod.digest}]
    client = docker.DockerClient(base_url=docker_sim_host.docker_url)
    image = client.containers.get(run.handle.split(":", 1)[-1]).attrs["Config"]["Image"]
    assert image.startswith("sparkpanel-mods/")
    from tests.conftest import read_file_in_image

    assert read_file_in_image(client, image, "/app/team.jinja") == b"{{ messages }}"
    # The base image's working directory (where --chat-template team.jinja is read).
    assert client.images.get(image).attrs["Config"]["WorkingDir"] == "/app"
    runner.stop(run.pk)

    (folder / "run.sh").write_text("#!/bin/sh\necho this vLLM has no such file\nexit 4\n")
    approve(add_mod(user=admin_user, folder=str(folder)), user=admin_user,
            hosts=[docker_sim_host])  # fmt: skip
    failed = run_start(recipe=qwen, host=docker_sim_host, user=operator)
    runner.start(failed.pk)
    failed = Run.objects.get(pk=failed.pk)
    assert failed.state == RunState.FAILED
    assert "run.sh exited 4" in failed.failure_reason
    assert "this vLLM has no such file" in failed.failure_reason
    client.close()

"""The panel's image, built from the project's own Dockerfile in the test Docker engine and
run the way docker-compose.yml runs it (issue 44, point 1).

No registry can be pulled on the test machine, so the base is made from Debian's own
packages (tools/base_image.sh: debootstrap --variant=minbase bookworm with Python) and given
to the Dockerfile as its BASE build argument; on a Spark the same file builds from the
official Python image (docs/deploy.md, "What was verified where").
"""

from __future__ import annotations

import re
import subprocess
import uuid

import httpx
import pytest

from tests.conftest import ROOT, free_port, wait_for

TAG = "sparkpanel:test"


def _docker(*args: str, timeout: float = 60) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, check=False)  # fmt: skip
    assert done.returncode == 0, f"docker {' '.join(args[:3])}…: {done.stderr[-3000:]}"
    return done.stdout


def _logs(name: str) -> str:
    done = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
    return (done.stdout + done.stderr)[-4000:]


def _waited(check, timeout: float) -> bool:
    try:
        wait_for(check, timeout, "")
    except AssertionError:
        return False
    return True


@pytest.fixture(scope="module")
def panel_image(docker_url) -> str:
    """The image, built on the Debian base (both cached: the base's root file system per
    machine, the layers in the engine)."""
    base = subprocess.run(["tools/base_image.sh"], capture_output=True, text=True, cwd=ROOT,
                          timeout=1200, check=False)  # fmt: skip
    assert base.returncode == 0, base.stderr[-3000:]
    # Host networking: the engine has no bridge network here, and pip fetches from PyPI.
    _docker("build", "--network", "host", "--build-arg", f"BASE={base.stdout.strip()}",
            "-t", TAG, ".", timeout=1800)  # fmt: skip
    return TAG


@pytest.fixture
def container(panel_image):
    names: list[str] = []

    def run(*args: str, env: dict[str, str], command: str = "web") -> str:
        name = f"sparkpanel-test-{uuid.uuid4().hex[:8]}"
        flags = [f"--env={key}={value}" for key, value in env.items()]
        _docker("run", "-d", "--name", name, "--network", "host", *flags, *args, panel_image,
                command)  # fmt: skip
        names.append(name)
        return name

    yield run
    for name in names:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def test_the_image_serves_the_panel_with_its_static_files_as_a_user_without_root(
    container, redis_url
):
    port = free_port()
    name = container(env={
        "PORT": str(port), "SECRET_KEY": "s" * 50, "ALLOWED_HOSTS": "127.0.0.1",
        "DEBUG": "false", "REDIS_URL": redis_url,
    })  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{base}/accounts/login/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    if not _waited(up, 120):
        pytest.fail(f"the image's web server did not answer; its log:\n{_logs(name)}")
    page = httpx.get(f"{base}/accounts/login/", timeout=5)
    assert "<title>Sign in" in page.text
    # collectstatic ran at build time; whitenoise serves what it collected.
    css = re.search(r'href="(/static/[^"]+\.css)"', page.text)
    assert css, page.text[:2000]
    assert httpx.get(base + css.group(1), timeout=5).status_code == 200
    # The web's start migrated its database (the entry point's `migrate`).
    assert "No planned migration" in _docker(
        "exec", name, "python", "manage.py", "migrate", "--plan"
    )
    # Every package of the project is in the image, not only those the Dockerfile once listed.
    imports = "import apps, sparkdomain, sparksim, vllm_adapter, hf_adapter, ray_adapter, git_adapter, hubsim, sparkcli"
    _docker("exec", "-w", "/", name, "python", "-c", imports)
    assert _docker("exec", name, "id", "-u").strip() != "0"

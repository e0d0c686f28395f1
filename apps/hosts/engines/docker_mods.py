"""Applying reviewed container mods (sparkdomain/mods.py) on a Docker host: the image a run
uses becomes a derived image with the mods applied, built once per base image and set of
reviewed files.

For each mod, in the recipe's order: a build container from the current image, made from
the fixed template (no privilege, no added capability, no-new-privileges, no mount, no GPU,
the host's network choice so a mod may install a package), gets the mod's files put at
`/workspace/mods/<name>/` and runs `./run.sh` there with `WORKSPACE_DIR` set to the image's
working directory — as sparkrun runs it — for at most MOD_TIMEOUT_S. A mod that exits 0 is
committed (the image's own working directory kept) and the next mod starts from that; one
that fails stops the start with its last output lines. The derived image is tagged
`sparkpanel-mods/<host>:<digest of the base image id and the mods' digests>`: the next start
with the same image and mods uses it as it is."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import docker.errors

from apps.hosts.engines.base import EngineError
from sparkdomain.mods import CONTAINER_MODS_DIR, ModBundle, derived_tag

if TYPE_CHECKING:
    from apps.hosts.engines.docker import DockerEngine

MOD_TIMEOUT_S = 900
LABEL_MOD = "sparkpanel.mod"


def derived_repository(host_name: str) -> str:
    return "sparkpanel-mods/" + (re.sub(r"[^a-z0-9._-]+", "-", host_name.lower()).strip(".-_")
                                 or "host")  # fmt: skip


def modded_image(
    engine: DockerEngine,
    base: str,
    bundles: tuple[ModBundle, ...] | list[ModBundle],
    *,
    say: Callable[[str], None] = lambda line: None,
    timeout_s: float = MOD_TIMEOUT_S,
) -> str:
    """The derived image of `base` with `bundles` applied (built now if this host has not
    built it yet)."""
    from apps.hosts.engines.docker import LABEL_HOST, _short, fixed_template

    client = engine.client
    try:
        image = client.images.get(base)
    except docker.errors.ImageNotFound:
        raise EngineError(f"the image {base} is not on {engine.host_name}") from None
    except docker.errors.APIError as exc:
        raise EngineError(f"Docker: {_short(exc)}") from None
    repository, tag = derived_repository(engine.host_name), derived_tag(image.id, list(bundles))
    ref = f"{repository}:{tag}"
    if engine.has_image(ref):
        say(f"Mods already applied to {base} on {engine.host_name}: {ref}")
        return ref
    base_config = image.attrs.get("Config") or {}
    workdir = base_config.get("WorkingDir") or "/"
    # The derived image keeps the base's own working dir, and its entrypoint and command
    # where it has them (Docker ignores an empty one in a commit: a base without one keeps
    # run.sh there, which no run uses — the engine always gives the entrypoint and command).
    restore = [f"WORKDIR {workdir}"]
    for key, instruction in (("Entrypoint", "ENTRYPOINT"), ("Cmd", "CMD")):
        if base_config.get(key):
            restore.append(f"{instruction} {json.dumps(base_config[key])}")
    current = image.id
    for index, bundle in enumerate(bundles):
        last = index == len(bundles) - 1
        say(f"Applying mod {bundle.name} ({index + 1} of {len(bundles)})")
        folder = f"{CONTAINER_MODS_DIR}/{bundle.name}"
        config: dict = {
            "image": current,
            "entrypoint": [f"{folder}/run.sh"],
            "command": [],
            "working_dir": folder,
            "environment": {"WORKSPACE_DIR": workdir},
            "name": f"sparkpanel-{engine.host_name}-mod-{tag[:12]}-{index}",
            "labels": {LABEL_HOST: engine.host_name, LABEL_MOD: bundle.name},
            **fixed_template(engine.shm_size_gib),
        }
        if engine.network == "host":
            config["network_mode"] = "host"
        container = None
        try:
            _remove_named(client, config["name"])
            container = client.containers.create(**config)
            container.put_archive("/", bundle.archive())
            container.start()
            try:
                status = container.wait(timeout=timeout_s).get("StatusCode", -1)
            except Exception:
                container.kill()
                raise EngineError(
                    f"mod {bundle.name} ran longer than {timeout_s:.0f} s in {base}; stopped"
                ) from None
            output = container.logs(tail=20).decode("utf-8", "replace").strip()
            if status != 0:
                tail = " | ".join(output.splitlines()[-6:])
                raise EngineError(
                    f"mod {bundle.name} failed in {base} (run.sh exited {status}): "
                    f"{tail[-600:] or 'no output'}"
                )
            committed = container.commit(
                repository=repository if last else None, tag=tag if last else None,
                changes=restore,
            )  # fmt: skip
            current = committed.id
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker, applying mod {bundle.name}: {_short(exc)}") from None
        finally:
            if container is not None:
                with contextlib.suppress(docker.errors.APIError):
                    container.remove(force=True)
    say(f"Mods applied: {ref}")
    return ref


def _remove_named(client, name: str) -> None:
    """A build container a crashed worker left behind."""
    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(name).remove(force=True)

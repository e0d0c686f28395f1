"""Starting and stopping runs: admission control, then the host's own queue does the work."""

from __future__ import annotations

import socket

from django.db import IntegrityError, transaction

from apps.hosts.meminfo import MeminfoError
from apps.hosts.models import Host
from apps.recipes.command import UnsafeCommand, contract_problems, serve_argv
from apps.recipes.flags import FlagError, check_utilization
from apps.recipes.models import Recipe
from apps.recipes.spark import GB, GIB
from apps.runs.models import STARTING_STATES, Run, RunState


class RunRefused(Exception):
    """Admission control said no; the message says why, with numbers. `code` says which
    rule: host_busy, no_free_port, not_enough_memory, memory_unknown (the state of the
    host), or image_not_allowed, unsafe_recipe (the request itself)."""

    def __init__(self, message: str, code: str = "refused"):
        super().__init__(message)
        self.code = code


def _free_port(host: Host) -> int:
    taken = set(Run.objects.active().filter(host=host).values_list("port", flat=True))
    for port in range(host.port_min, host.port_max + 1):
        if port in taken:
            continue
        if host.engine == Host.Engine.PROCESS or (
            host.docker_network == Host.DockerNetwork.HOST and host.advertise_host == "127.0.0.1"
        ):
            # A server on this machine's network: the port must also be free here.
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise RunRefused(
        f"no free port in {host.name}'s range {host.port_min}–{host.port_max}", "no_free_port"
    )


def _bind_address(host: Host) -> str:
    # In a container with its own network vLLM listens on all of the container's
    # interfaces (Docker publishes the port); a local process, or a container on the host's
    # network, listens only where the panel reaches it.
    bridged = host.engine == Host.Engine.DOCKER and host.docker_network == Host.DockerNetwork.BRIDGE
    return "0.0.0.0" if bridged else host.advertise_host  # noqa: S104


def argv_on(recipe: Recipe, host: Host, port: int | None = None) -> list[str]:
    """The exact `vllm serve` vector the panel runs for a recipe on a host (the port is the
    first of the host's range unless the run got another)."""
    return serve_argv(recipe, host=_bind_address(host), port=port or host.port_min)


def default_argv(recipe: Recipe) -> list[str]:
    """The vector for the default host (what the API and the YAML export show); without
    any host, the vector an engine would complete with its own address and port."""
    host = Host.objects.default()
    try:
        return argv_on(recipe, host) if host is not None else serve_argv(recipe)
    except UnsafeCommand:
        return []


def admission_check(*, recipe: Recipe, host: Host) -> None:
    try:
        check_utilization(recipe.gpu_memory_utilization)
    except FlagError as exc:  # a recipe row changed behind the validators' back
        raise RunRefused(f"this recipe cannot be started: {exc}", "unsafe_recipe") from None
    problems = contract_problems(recipe, host.contract_version)
    if problems:
        # The recipe was checked against the default host's vLLM; this host may differ.
        raise RunRefused(
            f"{host.name}'s vLLM {host.contract_version} would refuse this recipe: "
            + "; ".join(message for _, message in problems),
            "unsafe_recipe",
        )
    active = Run.objects.active().filter(host=host).select_related("recipe").first()
    if active is not None:
        raise RunRefused(
            f"{host.name} already runs “{active.recipe}” ({active.get_state_display().lower()}): "
            "stop it first — one model at a time per Spark.",
            "host_busy",
        )
    if not host.image_allowed(recipe.image):
        raise RunRefused(
            f"{host.name} does not allow the image {recipe.image} (see the host's allowlist).",
            "image_not_allowed",
        )
    try:
        memory, _source = host.measured_memory()
    except MeminfoError as exc:
        raise RunRefused(f"cannot measure {host.name}'s memory: {exc}", "memory_unknown") from None
    spec = host.spec()
    pool = float(recipe.gpu_memory_utilization) * spec.cuda_visible_gib * GIB
    needed = pool + spec.freeze_margin_gb * GB
    if memory.available_bytes < needed:
        raise RunRefused(
            f"{host.name} has {memory.available_bytes / GB:.1f} GB available; this recipe's vLLM "
            f"pool takes {pool / GB:.1f} GB ({recipe.gpu_memory_utilization} × "
            f"{spec.cuda_visible_gib} GiB) and {spec.freeze_margin_gb:g} GB must stay free, so it "
            f"needs {needed / GB:.1f} GB. Stop what else is using memory or lower the utilization.",
            "not_enough_memory",
        )


def run_create(*, recipe: Recipe, host: Host, user, restart_of: Run | None = None) -> Run:
    """Admission control, then the queued run row. Whoever calls this starts it."""
    admission_check(recipe=recipe, host=host)
    port = _free_port(host)
    try:
        argv = argv_on(recipe, host, port)
    except UnsafeCommand as exc:  # a recipe row changed behind the validators' back
        raise RunRefused(f"this recipe cannot be started: {exc}", "unsafe_recipe") from None
    try:
        with transaction.atomic():
            return Run.objects.create(
                recipe=recipe, host=host, started_by=user, port=port, image=recipe.image,
                argv=argv, step="Waiting for the host's worker", restart_of=restart_of,
            )  # fmt: skip
    except IntegrityError:
        raise RunRefused(
            f"{host.name} already has an active run: stop it first.", "host_busy"
        ) from None


def run_start(*, recipe: Recipe, host: Host, user, restart_of: Run | None = None) -> Run:
    """Admit and queue a run: the host's own worker starts it."""
    from apps.runs.tasks import start_run

    run = run_create(recipe=recipe, host=host, user=user, restart_of=restart_of)
    transaction.on_commit(lambda: start_run.apply_async(args=[run.pk], queue=host.queue))
    return run


def run_stop(*, run: Run) -> Run:
    """Ask a run to stop. While it starts, its start task sees the state and stops it; a
    ready run is stopped by a task on the host's queue."""
    from apps.runs.tasks import stop_run

    run.refresh_from_db()
    if not run.is_active or run.state == RunState.STOPPING:
        return run
    was_starting = run.state in STARTING_STATES
    run.transition(RunState.STOPPING, step="Stopping")
    if not was_starting:
        transaction.on_commit(lambda: stop_run.apply_async(args=[run.pk], queue=run.host.queue))
    return run


def run_restart(*, run: Run, user) -> Run:
    """Restart a run: an active one is stopped and its recipe started again as a new run by
    a task on the host's queue; a finished one is simply started again (admission applies)."""
    from apps.runs.tasks import restart_run

    run.refresh_from_db()
    if not run.is_active:
        return run_start(recipe=run.recipe, host=run.host, user=user, restart_of=run)
    if run.state != RunState.STOPPING:
        run.transition(RunState.STOPPING, step="Stopping to restart")
    transaction.on_commit(
        lambda: restart_run.apply_async(args=[run.pk, user.pk], queue=run.host.queue)
    )
    return run

"""The exact ``vllm serve`` vector of a recipe on a host (the pure command lives in
``sparkdomain.command``; this adds the host's address and port from the database)."""

from __future__ import annotations

from apps.hosts.models import Host
from apps.recipes.models import Recipe
from sparkdomain.command import UnsafeCommand, serve_argv


def bind_address(host: Host) -> str:
    """Where vLLM listens on the host."""
    # In a container with its own network vLLM listens on all of the container's
    # interfaces (Docker publishes the port); a local process, or a container on the host's
    # network, listens only where the panel reaches it.
    bridged = host.engine == Host.Engine.DOCKER and host.docker_network == Host.DockerNetwork.BRIDGE
    return "0.0.0.0" if bridged else host.advertise_host  # noqa: S104


def argv_on(recipe: Recipe, host: Host, port: int | None = None) -> list[str]:
    """The exact `vllm serve` vector the panel runs for a recipe on a host (the port is the
    first of the host's range unless the run got another). A local model or tokenizer must
    lie in this host's model directories (UnsafeCommand says why not)."""
    return serve_argv(
        recipe, host=bind_address(host), port=port or host.port_min,
        model_dirs=host.model_dirs(),
    )  # fmt: skip


def default_argv(recipe: Recipe) -> list[str]:
    """The vector for the default host (what the API and the YAML export show); without
    any host, the vector an engine would complete with its own address and port. A path in
    one of the recipe's own folders is shown as it is: each start checks that its host has
    the folder (apps/runs/services.py::folders_refusal)."""
    host = Host.objects.default()
    try:
        if host is None:
            return serve_argv(recipe)
        return serve_argv(
            recipe, host=bind_address(host), port=host.port_min,
            model_dirs=(*host.model_dirs(), *recipe.folder_dirs),
        )  # fmt: skip
    except UnsafeCommand:
        return []

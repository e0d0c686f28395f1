from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ray_adapter.nodes import RayNode


class EngineError(RuntimeError):
    """The engine could not do what was asked; the message is meant for the run's page."""


@dataclass(frozen=True)
class LaunchSpec:
    run_id: int
    host_name: str
    argv: list[str]  # `vllm serve <model> <flags>`, with --host/--port already in
    image: str
    port: int
    env: dict[str, str] = field(default_factory=dict)
    # What sparksim computes memory from on a simulated host (sparksim/facts.py): the
    # recipe's checkpoint (the planner's Architecture fields) and the host's memory (its
    # HostSpec fields). Real vLLM reads both from the checkpoint and the GPU: only an
    # engine that starts sparksim passes them on (sim_env).
    checkpoint: dict | None = None
    host_facts: dict | None = None
    # A pair run's API server (tensor parallel over Ray): its ranks run in the Ray nodes,
    # which keep each Spark's memory; a simulated server then writes no meminfo itself.
    pair: bool = False
    ray_temp_dir: str = ""  # the head Ray node's session files (a container mounts them)
    # The head Ray node's handle ref: vLLM's driver finds its node among the processes it
    # can see, so a container shares that node's process namespace (never the host's).
    ray_node_ref: str = ""
    # Reviewed container mods (sparkdomain/mods.py) the recipe's image gets before vLLM
    # starts: a Docker engine applies them (docker_mods.py); a local process cannot.
    mods: tuple = ()


# What a managed thing is: a run's model server, or one of a pair run's Ray nodes.
ROLE_SERVER, ROLE_RAY = "server", "ray"


@dataclass(frozen=True)
class RayNodeSpec:
    """One side of a pair run's Ray cluster, on this engine's host (ray_adapter/nodes.py
    describes the node; the engine runs it as that host runs things)."""

    run_id: int
    host_name: str
    node: RayNode
    image: str  # the run's image (the same vLLM, so the same Ray, on both Sparks)
    env: dict[str, str] = field(default_factory=dict)


def sim_args_for(spec: LaunchSpec, sim_args: list[str]) -> list[str]:
    """A simulated host's sparksim flags for this server: a pair's server leaves the
    host's meminfo to its Ray node's rank (sparksim/tensor_parallel.py)."""
    if not spec.pair or "--meminfo-file" not in sim_args:
        return list(sim_args)
    at = sim_args.index("--meminfo-file")
    return sim_args[:at] + sim_args[at + 2 :]


# The environment variables sparksim reads them from (sparksim/facts.py).
SPARKSIM_CHECKPOINT = "SPARKSIM_CHECKPOINT"
SPARKSIM_HOST = "SPARKSIM_HOST"


def sim_env(spec: LaunchSpec) -> dict[str, str]:
    """The checkpoint's and the host's facts, as sparksim's environment."""
    env: dict[str, str] = {}
    if spec.checkpoint is not None:
        env[SPARKSIM_CHECKPOINT] = json.dumps(spec.checkpoint, sort_keys=True)
    if spec.host_facts is not None:
        env[SPARKSIM_HOST] = json.dumps(spec.host_facts, sort_keys=True)
    return env


@dataclass(frozen=True)
class ImageIdentity:
    """The image a server really gets: a tag moves under you (a nightly), a digest does not.
    Everything is blank where there is no image (a local process)."""

    reference: str = ""  # the reference the engine runs (a simulated host's sim image)
    digest: str = ""  # the registry's manifest digest, "sha256:…"; blank for a local build
    pinned: str = ""  # "repo@sha256:…": what `docker pull` takes to get exactly this image
    image_id: str = ""  # the local image id ("sha256:…" of its config)


@dataclass(frozen=True)
class Handle:
    engine: str
    ref: str  # container id, or "pid:create_time" for a process

    def __str__(self) -> str:
        return f"{self.engine}:{self.ref}"

    @classmethod
    def parse(cls, text: str) -> Handle:
        engine, _, ref = text.partition(":")
        if not engine or not ref:
            raise EngineError(f"not an engine handle: {text!r}")
        return cls(engine, ref)


class State(StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    MISSING = "missing"


@dataclass(frozen=True)
class Status:
    state: State
    exit_code: int | None = None
    reason: str = ""  # e.g. "killed by the kernel's out-of-memory killer"

    def describe(self) -> str:
        code = "unknown" if self.exit_code is None else self.exit_code
        if self.state is State.MISSING:
            return "the server's container is gone"
        text = f"the server exited with code {code}"
        return f"{text} ({self.reason})" if self.reason else text


@dataclass(frozen=True)
class Managed:
    run_id: int
    handle: Handle
    status: Status
    role: str = ROLE_SERVER


class Engine(abc.ABC):
    name: str

    @abc.abstractmethod
    def start(self, spec: LaunchSpec) -> Handle: ...

    @abc.abstractmethod
    def status(self, handle: Handle) -> Status: ...

    @abc.abstractmethod
    def read_logs(self, handle: Handle, cursor: int) -> tuple[list[str], int]:
        """Complete log lines after `cursor`, and the cursor to pass next time."""

    @abc.abstractmethod
    def stop(self, handle: Handle, *, timeout: float = 30.0) -> None:
        """Graceful stop (SIGTERM), then kill after `timeout` seconds."""

    def kill(self, handle: Handle) -> None:
        """Stop at once (SIGKILL): the memory watchdog has no 30 s to spare."""
        self.stop(handle, timeout=0)

    @abc.abstractmethod
    def remove(self, handle: Handle) -> None: ...

    @abc.abstractmethod
    def list_managed(self) -> list[Managed]: ...

    def log_path(self, handle: Handle) -> Path | None:
        return None

    def tail(self, handle: Handle, lines: int = 40) -> list[str]:
        """The last log lines (for a failure report)."""
        return self.read_logs(handle, 0)[0][-lines:]

    def image_for(self, spec: LaunchSpec) -> str:
        return spec.image

    def needs_pull(self, spec: LaunchSpec) -> bool:
        """Whether `pull` must run before `start` (only containers have images)."""
        return False

    def pull(self, spec: LaunchSpec, progress=None, should_stop=None) -> None:
        return None

    def image_identity(self, spec: LaunchSpec) -> ImageIdentity:
        """What the run will run, by digest (read after any pull, before the start)."""
        return ImageIdentity()

    def list_unmanaged(self) -> list[dict]:
        """Servers on the host that the panel did not start: {id, name, image, status}."""
        return []

    def start_ray_node(self, spec: RayNodeSpec) -> Handle:
        """Start this host's Ray node of a pair run (`ray start --block`), labelled with the
        run; a redelivered task gets the node already running."""
        raise EngineError(f"the {self.name} engine cannot run a pair's Ray node")

    def check_link(self, spec: RayNodeSpec, timeout: float = 60) -> str:
        """Run ray_adapter's link check where `spec`'s node would run (this Spark's own
        network namespace, with the image's Python); its output."""
        raise EngineError(f"the {self.name} engine cannot check a pair's link")

    def probe_cluster(self, handle: Handle, head_address: str, timeout: float = 60) -> str:
        """Run ray_adapter's probe in the environment of the Ray node `handle` (the image's
        own Python and Ray); its output."""
        raise EngineError(f"the {self.name} engine cannot probe a Ray cluster")

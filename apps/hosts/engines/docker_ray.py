"""A pair run's Ray node as a container (the Docker engine's part of docs/two-sparks.md).

The node runs in the run's image (the same vLLM, so the same Ray, on both Sparks) on the
host's network — Ray's nodes, NCCL and vLLM's ranks talk over the link addresses — with
the container template's fixed rules otherwise (no privileges, no added capabilities,
no-new-privileges, an init, the host's shm size; GPUs and the HF cache as the host
decides). Its session files (Ray's sockets) live in a private host directory mounted at
the same path, which the head's API server container mounts too: vLLM's driver joins the
node on its own machine through them. A simulated host runs the panel's own `ray` in its
empty image, as it runs sparksim.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import docker
import requests

from apps.hosts.engines.base import ROLE_RAY, EngineError, Handle, RayNodeSpec
from ray_adapter import link as ray_link
from ray_adapter import nodes as ray_nodes
from ray_adapter import probe as ray_probe

LABEL_ROLE = "sparkpanel.role"
ROLE_LINK = "link-check"  # a pair side's link check, gone within a minute


def ray_container_name(host_name: str, run_id: int) -> str:
    return f"sparkpanel-{host_name}-run-{run_id}-ray"


class DockerRayNodes:
    """start_ray_node / probe_cluster for DockerEngine (which it is mixed into)."""

    def ray_container_config(self, spec: RayNodeSpec) -> dict:
        from apps.hosts.engines.docker import (
            HF_CACHE_IN_CONTAINER,
            LABEL_HOST,
            LABEL_RUN,
            SIM_BASE_IMAGE,
            fixed_template,
        )

        if self.network != "host":
            raise EngineError(
                f"{self.host_name}'s containers have their own network: a pair's Ray nodes "
                "need the host's network (an admin sets the host's container network to "
                "Host) — Ray and NCCL talk over the link addresses"
            )
        node = spec.node
        mounts: dict[str, dict[str, str]] = {}
        env = dict(self.server_env) if not self.simulated else {}
        env.update(ray_nodes.node_env(node))
        env.update(spec.env)
        if node.temp_dir:
            mounts[node.temp_dir] = {"bind": node.temp_dir, "mode": "rw"}
        if self.simulated:
            image = self.sim_image
            entrypoint = [str(Path(sys.executable).with_name("ray"))]
            self._add_sim_runtime(mounts, env)
        else:
            image = spec.image
            self._check_image(image)
            entrypoint = ["ray"]
            if self.hf_cache:  # the ranks read the weights on their own Spark
                mounts[self.hf_cache] = {"bind": HF_CACHE_IN_CONTAINER, "mode": "rw"}
            if self._hf_token:
                env["HF_TOKEN"] = self._hf_token
        config: dict = {
            "image": image,
            "entrypoint": entrypoint,
            "command": ray_nodes.start_argv(node)[1:],
            "name": ray_container_name(self.host_name, spec.run_id),
            "labels": {
                LABEL_RUN: str(spec.run_id),
                LABEL_HOST: self.host_name,
                LABEL_ROLE: ROLE_RAY,
            },
            "environment": env,
            "volumes": mounts,
            "network_mode": "host",
            **fixed_template(self.shm_size_gib),
        }
        if self.model_folders and not self.simulated:  # each rank reads them on its Spark
            config["mounts"] = self.folder_mounts()
        if self.gpus:
            from docker.types import DeviceRequest

            config["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        if image == SIM_BASE_IMAGE:
            self._ensure_sim_base()
        return config

    def start_ray_node(self, spec: RayNodeSpec) -> Handle:
        config = self.ray_container_config(spec)  # refuses before anything starts
        name = config["name"]
        try:
            existing = self.client.containers.get(name)
        except docker.errors.NotFound:
            existing = None
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker: {exc}") from None
        if existing is not None:  # a redelivered task: that node already
            if existing.status == "created":
                self._start(existing)
            return Handle(self.name, existing.id)
        container = self._create(config, "the Ray node's container")
        self._start(container)
        return Handle(self.name, container.id)

    def _create(self, config: dict, what: str):
        try:
            return self.client.containers.create(**config)
        except docker.errors.ImageNotFound:
            raise EngineError(f"the image {config['image']} is not on {self.host_name}") from None
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker refused {what}: {exc}") from None

    def check_link(self, spec: RayNodeSpec, timeout: float = 60) -> str:
        """The link check in a throwaway container of the node's own image and template on
        the host's network: this worker may itself run in a container with a network of
        its own, which would show its interfaces, not the Spark's."""
        config = self.ray_container_config(spec)  # refuses alike (image, network)
        node = spec.node
        config.update(
            entrypoint=[sys.executable if self.simulated else "python3"],
            command=ray_link.link_argv("", node.nccl_interface, node.node_ip)[1:],
            name=f"{config['name']}-link",
            labels={**config["labels"], LABEL_ROLE: ROLE_LINK},
        )
        config.pop("device_requests", None)  # it reads the network, not the GPU
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            self.client.containers.get(config["name"]).remove(force=True)  # an earlier try's
        container = self._create(config, "the link check's container")
        try:
            container.start()
            container.wait(timeout=timeout)
            output = container.logs(stdout=True, stderr=True, tail=200)
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            return f"the link check did not finish: {type(exc).__name__}: {str(exc)[:300]}"
        finally:
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True)
        return output.decode("utf-8", "replace")[-ray_link.MAX_OUTPUT :]

    def probe_cluster(self, handle: Handle, head_address: str, timeout: float = 60) -> str:
        container = self._container(handle)
        if container is None:
            raise EngineError("the head's Ray node container is gone")
        python = sys.executable if self.simulated else "python3"
        try:
            _code, output = container.exec_run(
                ray_probe.probe_argv(python, head_address),
                environment={"RAY_USAGE_STATS_ENABLED": "0"}, demux=False,
            )  # fmt: skip
        except docker.errors.APIError as exc:
            raise EngineError(f"Docker could not run the Ray probe: {exc}") from None
        with contextlib.suppress(AttributeError):
            output = output.decode("utf-8", "replace")
        return str(output or "")[-ray_probe.MAX_OUTPUT :]

"""Engines start and stop a vLLM server on a host. One interface, two implementations:
DockerEngine (a vLLM container on a Spark) and ProcessEngine (a local subprocess:
sparksim, or a native vllm). Both receive the same `vllm serve` vector."""

from apps.hosts.engines.base import Engine, EngineError, Handle, LaunchSpec, Managed, Status

__all__ = ["Engine", "EngineError", "Handle", "LaunchSpec", "Managed", "Status", "engine_for"]


def engine_for(host) -> Engine:
    from django.conf import settings

    sim_args = [
        "--time-scale",
        f"{host.sim_time_scale:g}",
        "--meminfo-file",
        str(host.meminfo_file()),
    ]
    if host.simulated:
        for spec in host.fault_specs():
            sim_args += ["--fault", spec]
        # Both engines' simulated paths take these flags (the Docker one in its container).
        sim_args += ["--answers", host.sim_answers]
    if host.engine == host.Engine.PROCESS:
        from apps.hosts.engines.process import ProcessEngine

        return ProcessEngine(
            runs_dir=settings.VAR_DIR / "runs",
            simulated=host.simulated,
            sim_args=sim_args,
            host_name=host.name,
            # How this worker runs real vLLM: its own settings, never a recipe's.
            vllm_executable=settings.VLLM_EXECUTABLE,
            server_env=settings.VLLM_ENV,
            hf_token=settings.HF_TOKEN,  # a real vLLM's only; never the worker's whole env
            hf_home=host.hf_cache_path,
            model_folders=list(host.model_folders or ()),
        )
    from apps.hosts.engines.docker import DockerEngine, MountedVllm

    return DockerEngine(
        host_name=host.name,
        base_url=host.docker_url,
        gpus=host.gpus and not host.simulated,
        network=host.docker_network,
        hf_cache=host.hf_cache_path,
        model_folders=list(host.model_folders or ()),
        hf_token=settings.HF_TOKEN,  # from the worker's environment; never stored
        shm_size_gib=host.shm_size_gib,
        image_allowlist=host.image_allowlist,
        simulated=host.simulated,
        sim_image=host.sim_image,
        sim_args=sim_args,
        sim_state_dir=str(host.sim_state_dir()) if host.simulated else "",
        server_env=settings.VLLM_ENV,
        mounted_vllm=(
            MountedVllm.from_venv(settings.VLLM_CONTAINER_VENV)
            if settings.VLLM_CONTAINER_VENV and not host.simulated
            else None
        ),
    )

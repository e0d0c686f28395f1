"""Engines start and stop a vLLM server on a host. One interface, two implementations:
DockerEngine (the real thing on a Spark; not built yet) and ProcessEngine (a local
subprocess: sparksim, or a native vllm). Both receive the same `vllm serve` vector."""

from apps.hosts.engines.base import Engine, EngineError, Handle, LaunchSpec, Managed, Status

__all__ = ["Engine", "EngineError", "Handle", "LaunchSpec", "Managed", "Status", "engine_for"]


def engine_for(host) -> Engine:
    from django.conf import settings

    from apps.hosts.engines.process import ProcessEngine

    if host.engine == host.Engine.PROCESS:
        return ProcessEngine(
            runs_dir=settings.VAR_DIR / "runs",
            simulated=host.simulated,
            sim_args=[
                "--time-scale",
                f"{host.sim_time_scale:g}",
                "--meminfo-file",
                str(host.meminfo_file()),
            ],
        )
    raise EngineError(
        f"host {host.name!r} uses the Docker engine, which is not built yet in this version of "
        "SparkPanel; use a process-engine host (sparksim or a native vllm) for now"
    )

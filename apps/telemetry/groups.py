"""The Channels groups live telemetry is published to (the host agent sends, the
telemetry sockets join)."""


def host_group(name: str) -> str:
    return f"host-{name}"


def run_group(run_id: int) -> str:
    return f"run-{run_id}"

import time


def logs_until(engine, handle, text: str, timeout: float = 60) -> list[str]:
    """Follow an engine's log (its own cursor semantics) until a line contains `text`."""
    lines, cursor = [], 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new, cursor = engine.read_logs(handle, cursor)
        lines += new
        if any(text in line for line in lines):
            return lines
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} in {lines[-10:]}")

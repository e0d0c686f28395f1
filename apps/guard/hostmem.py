"""Host memory signals beyond MemAvailable: pressure stall information and the GPU's
per-process view. Pure Python (no Django), so the host agent and the tests can use it.

On a DGX Spark the CPU and the GPU share one pool, and nvidia-smi on GB10 reports
memory as "Not Supported"/"[N/A]" (SPEC §1), so MemAvailable from /proc/meminfo
(`sparkdomain.meminfo`) stays the number the watchdog acts on. The two readers here only
add context to an alert or an incident: how hard the kernel is already struggling to
find memory (PSI), and which processes hold the GPU.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkdomain.meminfo import MeminfoError

PSI_MEMORY_PATH = "/proc/pressure/memory"
NVIDIA_SMI = "nvidia-smi"
NVIDIA_SMI_TIMEOUT_S = 5.0
NVIDIA_SMI_QUERY = (
    "--query-compute-apps=pid,process_name,used_memory",
    "--format=csv,noheader,nounits",
)
MIB = 2**20

# What nvidia-smi prints instead of a number when it has none; on GB10's unified memory
# used_memory is one of these. They mean "unknown", never "0 MiB".
_NOT_A_NUMBER = {"[n/a]", "n/a", "not supported", "[not supported]", "[unknown error]"}

__all__ = [
    "GpuProcess",
    "MeminfoError",
    "NvidiaSmiError",
    "Psi",
    "PsiLine",
    "gpu_processes",
    "parse_gpu_processes",
    "parse_psi",
    "read_psi",
]


# --- pressure stall information --------------------------------------------------------


@dataclass(frozen=True)
class PsiLine:
    """One line of a PSI file: the share of wall time (in %) that tasks stalled on memory,
    averaged over 10, 60 and 300 s, and the total stall time in microseconds."""

    avg10: float
    avg60: float
    avg300: float
    total_us: int


@dataclass(frozen=True)
class Psi:
    """`some`: at least one task stalled; `full`: all non-idle tasks stalled at once.

    `full` is None only on a file without that line (the cpu file of older kernels); the
    memory file has had both since PSI was added in Linux 4.20.
    """

    some: PsiLine
    full: PsiLine | None


_PSI_KEYS = ("avg10", "avg60", "avg300", "total")


def _psi_line(line: str) -> tuple[str, PsiLine]:
    kind, *fields = line.split()
    if kind not in ("some", "full"):
        raise MeminfoError(f"malformed pressure line (expected 'some' or 'full'): {line!r}")
    values: dict[str, str] = {}
    for field in fields:
        key, sep, value = field.partition("=")
        if not sep or key in values:
            raise MeminfoError(f"malformed pressure line: {line!r}")
        values[key] = value
    missing = [key for key in _PSI_KEYS if key not in values]
    if missing:
        raise MeminfoError(f"pressure line has no {', '.join(missing)}: {line!r}")
    try:
        parsed = PsiLine(
            avg10=float(values["avg10"]),
            avg60=float(values["avg60"]),
            avg300=float(values["avg300"]),
            total_us=int(values["total"]),
        )
    except ValueError:
        raise MeminfoError(f"malformed number in pressure line: {line!r}") from None
    averages = (parsed.avg10, parsed.avg60, parsed.avg300)
    # float() accepts "nan"/"inf"; a share of time is a finite percentage.
    if not all(0.0 <= a <= 100.0 for a in averages) or parsed.total_us < 0:
        raise MeminfoError(f"pressure value out of range: {line!r}")
    return kind, parsed


def parse_psi(text: str) -> Psi:
    """Parse the text of a /proc/pressure/* file; MeminfoError says what is wrong."""
    lines: dict[str, PsiLine] = {}
    for raw in text.splitlines():
        if not raw.strip():
            continue
        kind, line = _psi_line(raw)
        if kind in lines:
            raise MeminfoError(f"pressure file has two {kind!r} lines")
        lines[kind] = line
    if "some" not in lines:
        raise MeminfoError("pressure file has no 'some' line")
    return Psi(some=lines["some"], full=lines.get("full"))


def read_psi(path: str | Path = PSI_MEMORY_PATH) -> Psi | None:
    """Memory pressure, or None where the kernel has no PSI (the file is absent).

    Absent is normal (a kernel built without CONFIG_PSI, or booted with psi=0), so it is
    None rather than an error; a file that exists but cannot be read or parsed is an error.
    """
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MeminfoError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return parse_psi(text)
    except MeminfoError as exc:
        raise MeminfoError(f"{path}: {exc}") from None


# --- nvidia-smi ------------------------------------------------------------------------


class NvidiaSmiError(RuntimeError):
    """nvidia-smi is installed but failed, timed out, or printed something unparseable."""


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    # None when nvidia-smi has no figure ("[N/A]"/"Not Supported", as on GB10): unknown,
    # which is not the same as using nothing.
    used_mib: int | None

    @property
    def used_bytes(self) -> int | None:
        return None if self.used_mib is None else self.used_mib * MIB


def _memory_mib(text: str, line: str) -> int | None:
    if text.lower() in _NOT_A_NUMBER:
        return None
    try:
        value = int(text)
    except ValueError:
        raise NvidiaSmiError(
            f"unexpected used_memory {text!r} in nvidia-smi row {line!r}"
        ) from None
    if value < 0:
        raise NvidiaSmiError(f"negative used_memory in nvidia-smi row {line!r}")
    return value


def parse_gpu_processes(text: str) -> list[GpuProcess]:
    """Parse `--query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits`.

    CSV without quoting: a process name may itself contain commas, so the pid is taken
    from the first field, the memory from the last and the name is what lies between.
    """
    processes: list[GpuProcess] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.lower().startswith("no running"):  # "No running processes found"
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 3:
            raise NvidiaSmiError(f"expected 'pid, process_name, used_memory', got {line!r}")
        pid_text, name, mem_text = fields[0], ", ".join(fields[1:-1]), fields[-1]
        try:
            pid = int(pid_text)
        except ValueError:
            raise NvidiaSmiError(
                f"unexpected pid {pid_text!r} in nvidia-smi row {line!r}"
            ) from None
        if pid <= 0:
            raise NvidiaSmiError(f"unexpected pid {pid_text!r} in nvidia-smi row {line!r}")
        processes.append(GpuProcess(pid=pid, name=name, used_mib=_memory_mib(mem_text, line)))
    return processes


def _tail(text: str | bytes | None, limit: int = 300) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def gpu_processes(
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    *,
    which: Callable[[str], str | None] = shutil.which,
    timeout_s: float = NVIDIA_SMI_TIMEOUT_S,
) -> list[GpuProcess] | None:
    """The compute processes nvidia-smi lists, or None where nvidia-smi is not installed.

    Run with an argument list (never a shell string) and a timeout, because a wedged
    driver can make nvidia-smi hang, and a poll must not hang with it. Failures raise
    NvidiaSmiError with nvidia-smi's own message.
    """
    executable = which(NVIDIA_SMI)
    if executable is None:
        return None
    argv = [executable, *NVIDIA_SMI_QUERY]
    try:
        result = run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise NvidiaSmiError(f"nvidia-smi did not answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise NvidiaSmiError(f"cannot run {executable}: {exc.strerror or exc}") from None
    if result.returncode != 0:
        detail = _tail(result.stderr) or _tail(result.stdout) or "no output"
        raise NvidiaSmiError(f"nvidia-smi exited with status {result.returncode}: {detail}")
    stdout = result.stdout
    if isinstance(stdout, bytes):
        stdout = stdout.decode(errors="replace")
    return parse_gpu_processes(stdout or "")

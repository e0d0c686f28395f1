"""The simulated unified-memory footprint of a Spark, published as a /proc/meminfo file.

On a DGX Spark the CPU and the GPU share one 128 GB pool, and on GB10 nvidia-smi reports
memory as "Not Supported", so the panel's host agent reads MemTotal and MemAvailable
from /proc/meminfo (SPEC §1). The simulator cannot change the real file, so it writes a
look-alike that the agent is pointed at instead. The numbers follow the simulated
vLLM process: OS services, then weights, KV pool and CUDA graphs as start-up proceeds,
plus any `mem-growth` fault creeping towards the point where a real Spark freezes.

Several servers may share one simulated host (co-location: all given the same meminfo
file). Each then publishes its own footprint in `<meminfo>.d/` (`HostFootprints`), and
every file any of them writes shows the OS plus the sum over the live ones, as the one
unified memory of a real Spark would.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

GB = 10**9
KIB = 1024

log = logging.getLogger("sparksim.memory")


def gb_per_min_to_bytes_per_s(gb_per_min: float) -> float:
    """Convert the `mem-growth:G` fault (GB per simulated minute) to MemoryModel's unit."""
    return gb_per_min * GB / 60


@dataclass
class MemoryModel:
    """What the simulated machine has in use, as a function of simulated time.

    Time is passed in rather than read from a clock so the model stays a pure function
    of its inputs: tests and the time-scaled engine ask "what at t?" without sleeping.
    """

    physical_bytes: int = 128 * GB
    os_bytes: int = 6 * GB  # DGX OS + services; the upper bound of seed 004's 4–6 GB
    growth_bytes_per_s: float = 0.0  # from mem-growth (per SIMULATED second)
    footprint_bytes: int = 0  # the vLLM process; see set_footprint

    def set_footprint(self, nbytes: int) -> None:
        """Set the vLLM process's footprint: weights + KV pool + CUDA graphs + context.

        The engine calls this as each start-up phase completes, so the panel sees memory
        fill in the same steps it would on the real machine.
        """
        if nbytes < 0:
            raise ValueError(f"footprint must not be negative, not {nbytes}")
        self.footprint_bytes = int(nbytes)

    def release(self) -> None:
        """The process stopped: its footprint and any leak are given back."""
        self.footprint_bytes = 0
        self.growth_bytes_per_s = 0.0

    def process_bytes(self, sim_elapsed_s: float) -> int:
        """What this process adds to "used": footprint + growth so far (at most physical).

        The figure a co-located server publishes for the others (`HostFootprints`).
        """
        growth = self.growth_bytes_per_s * max(0.0, sim_elapsed_s)
        return max(0, min(self.physical_bytes, self.footprint_bytes + int(growth)))

    def used_bytes(self, sim_elapsed_s: float, others_bytes: int = 0) -> int:
        """OS + footprint + growth so far (+ the other servers' on the host), capped at
        physical memory.

        Capped because a real Spark never reports more in use than it has: it freezes
        first (no OOM kill), and a watchdog must see MemAvailable reach 0, not go negative.
        """
        growth = self.growth_bytes_per_s * max(0.0, sim_elapsed_s)
        used = self.os_bytes + self.footprint_bytes + int(growth) + max(0, others_bytes)
        return max(0, min(self.physical_bytes, used))

    def available_bytes(self, sim_elapsed_s: float, others_bytes: int = 0) -> int:
        return self.physical_bytes - self.used_bytes(sim_elapsed_s, others_bytes)


# Fixed sizes of the kernel's own bookkeeping; plausible for an idle 128 GB arm64 host.
# They only make the file look real: the panel reads MemTotal and MemAvailable.
_SLAB_RECLAIMABLE = 420 * 2**20
_SLAB_UNRECLAIMABLE = 180 * 2**20
_KERNEL_STACK = 24 * 2**20
_PAGE_TABLES = 96 * 2**20
_SHMEM = 64 * 2**20
_DIRTY = 660 * KIB
_HUGEPAGE_KB = 2048


def _line(name: str, value: int, unit: bool = True) -> str:
    # The kernel prints the label padded to 16 columns, then the value right-aligned in
    # 8 (wider values simply overflow), then " kB" — `seq_put_decimal_ull_width`.
    return f"{name + ':':<16}{value:>8}" + (" kB" if unit else "")


def meminfo_text(model: MemoryModel, sim_elapsed_s: float, others_bytes: int = 0) -> str:
    """Render the model as /proc/meminfo text, values in kB with the kernel's spacing.

    `others_bytes`: what the other servers on the same host hold (`HostFootprints`).

    MemAvailable is exactly physical − used, since that is the number the panel acts on.
    Some of the available memory is shown as page cache, so MemFree sits slightly below
    MemAvailable, as on any running Linux host; a parser that reads MemFree by mistake
    then reports a visibly different (too low) figure instead of passing by accident.
    No swap: the scenario's Sparks run without it (swapping into the same pool only
    makes the freeze slower to arrive).
    """
    total = model.physical_bytes
    used = model.used_bytes(sim_elapsed_s, others_bytes)
    available = total - used
    # Page cache shrinks as memory runs out, like the kernel reclaiming it under pressure.
    buffers = min(128 * 2**20, available // 64)
    cached = min(3 * GB, available // 8)
    free = max(0, available - buffers - cached)
    kernel = _SLAB_RECLAIMABLE + _SLAB_UNRECLAIMABLE + _KERNEL_STACK + _PAGE_TABLES
    anon = max(0, used - kernel - _SHMEM)
    active_anon = anon * 9 // 10
    inactive_anon = anon - active_anon
    active_file = (buffers + cached) // 3
    inactive_file = buffers + cached - active_file

    def kb(nbytes: int) -> int:
        return nbytes // KIB

    rows: list[tuple[str, int, bool]] = [
        ("MemTotal", kb(total), True),
        ("MemFree", kb(free), True),
        ("MemAvailable", kb(available), True),
        ("Buffers", kb(buffers), True),
        ("Cached", kb(cached + _SHMEM), True),  # the kernel counts shmem as cache
        ("SwapCached", 0, True),
        ("Active", kb(active_anon + active_file), True),
        ("Inactive", kb(inactive_anon + inactive_file), True),
        ("Active(anon)", kb(active_anon), True),
        ("Inactive(anon)", kb(inactive_anon), True),
        ("Active(file)", kb(active_file), True),
        ("Inactive(file)", kb(inactive_file), True),
        ("Unevictable", 0, True),
        ("Mlocked", 0, True),
        ("SwapTotal", 0, True),
        ("SwapFree", 0, True),
        ("Dirty", kb(_DIRTY), True),
        ("Writeback", 0, True),
        ("AnonPages", kb(anon), True),
        ("Mapped", kb(min(anon, 900 * 2**20)), True),
        ("Shmem", kb(_SHMEM), True),
        ("KReclaimable", kb(_SLAB_RECLAIMABLE), True),
        ("Slab", kb(_SLAB_RECLAIMABLE + _SLAB_UNRECLAIMABLE), True),
        ("SReclaimable", kb(_SLAB_RECLAIMABLE), True),
        ("SUnreclaim", kb(_SLAB_UNRECLAIMABLE), True),
        ("KernelStack", kb(_KERNEL_STACK), True),
        ("PageTables", kb(_PAGE_TABLES), True),
        # With no swap and the default overcommit ratio (50), CommitLimit is half of RAM.
        ("CommitLimit", kb(total // 2), True),
        ("Committed_AS", kb(used), True),
        ("HugePages_Total", 0, False),
        ("HugePages_Free", 0, False),
        ("HugePages_Rsvd", 0, False),
        ("HugePages_Surp", 0, False),
        ("Hugepagesize", _HUGEPAGE_KB, True),
        ("Hugetlb", 0, True),
    ]
    return "".join(_line(name, value, unit) + "\n" for name, value, unit in rows)


def _umask() -> int:
    """The process's umask (set to the strictest while it is read: a file created in that
    instant errs on the private side)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _replace(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: a temp file in the same directory, then os.replace.

    The same directory, because os.replace is only atomic within one filesystem. No fsync:
    readers see the new file through the page cache straight away, and after a power cut
    a stale simulator file is worthless anyway.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
        # mkstemp creates 0600, but the host agent may run as another user: the mode an
        # ordinary open() would give (0644 under the usual umask; make run's 077 keeps
        # its var/ private).
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


FOOTPRINTS_SUFFIX = ".d"  # <meminfo>.d/: the footprints of the servers sharing the host
_ALIVE = ".alive"  # <id>.alive: locked by its server for as long as it lives
_HOST_LOCK = ".lock"  # serialises "add up the footprints, replace the meminfo file"
HOST_LOCK_WAIT_S = 0.2


def _is_id(name: str) -> bool:
    """A footprint file's name: `<pid>-<8 hex digits>`."""
    pid, _, token = name.partition("-")
    return pid.isdigit() and len(token) == 8 and all(c in "0123456789abcdef" for c in token)


class HostFootprints:
    """The footprints of the servers that share one simulated host, beside its meminfo file.

    Each server (or tensor-parallel rank) publishes what it adds to "used" in
    `<meminfo>.d/<pid>-<token>` (bytes, one number), replaced atomically on every write,
    and holds an exclusive flock on `<pid>-<token>.alive` for as long as it lives. The
    name is unique even where every server is pid 1 of its own container, and the lock
    says whether its owner lives across pid namespaces too (`os.kill(pid, 0)` cannot
    look into another container): the kernel drops it when the process ends, SIGKILL
    included, so a footprint whose lock can be taken is a dead server's, and is deleted.
    """

    def __init__(self, meminfo_path: str | os.PathLike[str]):
        self.dir = Path(f"{os.fspath(meminfo_path)}{FOOTPRINTS_SUFFIX}")
        self.id = f"{os.getpid()}-{os.urandom(4).hex()}"
        self.path = self.dir / self.id
        self._alive_fd: int | None = None

    def _claim(self) -> None:
        """Hold this server's lock (again, if its file was removed meanwhile)."""
        if self._alive_fd is not None:
            if os.fstat(self._alive_fd).st_nlink > 0:
                return
            os.close(self._alive_fd)  # someone removed the directory: claim anew
            self._alive_fd = None
        self.dir.mkdir(exist_ok=True)
        fd = os.open(self.dir / (self.id + _ALIVE), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        self._alive_fd = fd

    def publish(self, nbytes: int) -> None:
        """This server now holds `nbytes` (the lock is taken before the file appears)."""
        self._claim()
        _replace(self.path, f"{max(0, int(nbytes))}\n")

    def withdraw(self) -> None:
        """This server has stopped: its footprint and its lock go."""
        for path in (self.path, self.dir / (self.id + _ALIVE)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if self._alive_fd is not None:
            os.close(self._alive_fd)
            self._alive_fd = None

    def _alive(self, ident: str) -> bool:
        """Whether the server `ident` still holds its lock (it does when it lives)."""
        try:
            fd = os.open(self.dir / (ident + _ALIVE), os.O_RDONLY)
        except FileNotFoundError:
            return False
        except PermissionError:
            return True  # another user's file: only a live server keeps one
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def _remove(self, ident: str) -> None:
        for name in (ident, ident + _ALIVE):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()

    def live(self) -> dict[str, int]:
        """Every live server's footprint by its id, this one's included; a dead server's
        files (and its temp files, were it killed mid-write) are deleted on the way."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return {}
        footprints: dict[str, int] = {}
        for name in names:
            if name.startswith(".") and name.endswith(".tmp"):
                owner = name[1:].split(".", 1)[0]
                if _is_id(owner) and owner != self.id and not self._alive(owner):
                    with contextlib.suppress(FileNotFoundError):
                        (self.dir / name).unlink()
                continue
            if not _is_id(name):
                continue
            if name != self.id and not self._alive(name):
                self._remove(name)
                continue
            with contextlib.suppress(FileNotFoundError, ValueError):  # withdrawn meanwhile
                footprints[name] = int((self.dir / name).read_text(encoding="ascii"))
        return footprints

    def _others(self) -> int:
        return sum(n for ident, n in self.live().items() if ident != self.id)

    def others(self) -> int:
        """What the OTHER live servers on this host hold now (bytes)."""
        with self.locked():
            return self._others()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The host's lock: held while the footprints are added up and the meminfo file is
        replaced, so the last file written never predates the last footprint published
        (two servers stopping at once cannot leave one's memory showing forever).

        Held for a millisecond, so waited for briefly (on the event loop): past
        HOST_LOCK_WAIT_S (its holder stopped with SIGSTOP, say) the write goes ahead
        without it rather than freeze this server too.
        """
        self.dir.mkdir(exist_ok=True)
        # Read-only is enough for flock (and works on a file another user created).
        fd = os.open(self.dir / _HOST_LOCK, os.O_RDONLY | os.O_CREAT, 0o666)
        try:
            deadline = time.monotonic() + HOST_LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.001)
            yield
        finally:
            os.close(fd)


class MeminfoWriter:
    """Keeps a meminfo file current for the host agent to read.

    Every write replaces the file atomically, because the agent polls it on its own
    schedule: a reader must never see a half-written or empty file, which it would
    read as "0 kB available" and raise a false freeze alarm.

    `shared=True` (a server's own writer): the host may run other servers writing the same
    file. Each write then publishes this process's footprint (`HostFootprints`) and shows
    the OS plus the sum over every live server; alone, the file is the same as unshared.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        model: MemoryModel,
        *,
        clock: Callable[[], float],
        interval_s: float = 0.05,
        shared: bool = False,
    ) -> None:
        """`clock()` returns SIMULATED seconds since start; the caller scales time.

        `interval_s` is in wall seconds: it only sets how fresh the file is for a reader,
        which polls in wall time whatever the simulation speed. A kernel's /proc/meminfo
        is always current, and the host agent polls ten times a second while a server
        starts and fits a trend to consecutive readings: so 20 writes a second (a 1.5 kB
        file), or a fall would read as a staircase.
        """
        if interval_s <= 0:
            raise ValueError(f"interval_s must be greater than 0, not {interval_s}")
        self.path = Path(path)
        self.model = model
        self.clock = clock
        self.interval_s = interval_s
        self.footprints = HostFootprints(self.path) if shared else None

    def write_once(self) -> None:
        """Write the current numbers (shared: publish this footprint first), atomically."""
        elapsed = self.clock()
        if self.footprints is None:
            _replace(self.path, meminfo_text(self.model, elapsed))
            return
        self.footprints.publish(self.model.process_bytes(elapsed))
        self._write_shared(self.footprints, elapsed)

    def _write_shared(self, footprints: HostFootprints, elapsed: float) -> None:
        """The OS, this process and every other live server: the footprints are added up
        and the file replaced under the host's lock (`HostFootprints.locked`)."""
        with footprints.locked():
            others = footprints._others()
            _replace(self.path, meminfo_text(self.model, elapsed, others))

    def others_bytes(self) -> int:
        """What the other servers on this host hold now (0 unshared): vLLM's start gate
        sees them as memory in use by other processes. Unreadable: logged, and 0 (the
        server starts as it would alone rather than die of a simulator's file)."""
        if self.footprints is None:
            return 0
        try:
            return self.footprints.others()
        except OSError:
            log.exception("could not read the other servers' footprints in %s", self.footprints.dir)
            return 0

    def release(self) -> None:
        """The server stopped: its memory given back, and the file written once more to say
        so (shared: its footprint withdrawn, the others' still shown)."""
        self.model.release()
        if self.footprints is None:
            self.write_once()
            return
        self.footprints.withdraw()
        self._write_shared(self.footprints, self.clock())

    async def run(self) -> None:
        """Write every `interval_s` until cancelled; a failed write is logged, not fatal.

        Not fatal because a full disk or a removed directory must not take the simulated
        vLLM server down with it: the panel would then diagnose the wrong failure. Each
        distinct error is logged once (and the recovery too) rather than twice a second.
        The write itself runs on the event loop: it is a 1.5 kB file, cheaper than a
        hop to a worker thread.
        """
        last_error: str | None = None  # logged already; don't repeat it every interval
        while True:
            try:
                self.write_once()
            except Exception as exc:
                # Keyed on errno, not the message: an OSError's message names the random
                # temp file, so the same failure would never look the same twice.
                error = (
                    f"{type(exc).__name__} errno {exc.errno}"
                    if isinstance(exc, OSError)
                    else f"{type(exc).__name__}: {exc}"
                )
                if error != last_error:
                    log.exception("could not write %s; will keep trying", self.path)
                    last_error = error
            else:
                if last_error is not None:
                    log.info("writing %s again", self.path)
                    last_error = None
            await asyncio.sleep(self.interval_s)

"""The simulated unified-memory footprint of a Spark, published as a /proc/meminfo file.

On a DGX Spark the CPU and the GPU share one 128 GB pool, and on GB10 nvidia-smi reports
memory as "Not Supported", so the panel's host agent reads MemTotal and MemAvailable
from /proc/meminfo (SPEC §1). The simulator cannot change the real file, so it writes a
look-alike that the agent is pointed at instead. The numbers follow the simulated
vLLM process: OS services, then weights, KV pool and CUDA graphs as start-up proceeds,
plus any `mem-growth` fault creeping towards the point where a real Spark freezes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
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

    def used_bytes(self, sim_elapsed_s: float) -> int:
        """OS + footprint + growth so far, capped at physical memory.

        Capped because a real Spark never reports more in use than it has: it freezes
        first (no OOM kill), and a watchdog must see MemAvailable reach 0, not go negative.
        """
        growth = self.growth_bytes_per_s * max(0.0, sim_elapsed_s)
        used = self.os_bytes + self.footprint_bytes + int(growth)
        return max(0, min(self.physical_bytes, used))

    def available_bytes(self, sim_elapsed_s: float) -> int:
        return self.physical_bytes - self.used_bytes(sim_elapsed_s)


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


def meminfo_text(model: MemoryModel, sim_elapsed_s: float) -> str:
    """Render the model as /proc/meminfo text, values in kB with the kernel's spacing.

    MemAvailable is exactly physical − used, since that is the number the panel acts on.
    Some of the available memory is shown as page cache, so MemFree sits slightly below
    MemAvailable, as on any running Linux host; a parser that reads MemFree by mistake
    then reports a visibly different (too low) figure instead of passing by accident.
    No swap: the scenario's Sparks run without it (swapping into the same pool only
    makes the freeze slower to arrive).
    """
    total = model.physical_bytes
    used = model.used_bytes(sim_elapsed_s)
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


class MeminfoWriter:
    """Keeps a meminfo file current for the host agent to read.

    Every write replaces the file atomically, because the agent polls it on its own
    schedule: a reader must never see a half-written or empty file, which it would
    read as "0 kB available" and raise a false freeze alarm.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        model: MemoryModel,
        *,
        clock: Callable[[], float],
        interval_s: float = 0.05,
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

    def write_once(self) -> None:
        """Write the current numbers: a temp file in the same directory, then os.replace.

        The same directory, because os.replace is only atomic within one filesystem.
        No fsync: readers see the new file through the page cache straight away, and
        after a power cut a stale simulator file is worthless anyway.
        """
        text = meminfo_text(self.model, self.clock())
        fd, tmp = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
        )
        try:
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(text)
            # mkstemp creates 0600, but the host agent may run as another user: the mode an
            # ordinary open() would give (0644 under the usual umask; make run's 077 keeps
            # its var/ private).
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

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

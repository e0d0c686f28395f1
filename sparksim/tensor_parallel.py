"""sparksim's tensor-parallel mode: vLLM's Ray executor, played on a real Ray cluster.

A pair of Sparks serves one model with `--tensor-parallel-size 2 --distributed-executor-backend
ray`: vLLM's API server (the driver) joins the Ray cluster the two Sparks form, reserves one
GPU per rank in a placement group, and starts one worker actor per rank where the group put
it — one on each Spark, since each has one GPU (vLLM 0.33, `v1/executor/ray_utils.py` and
`ray_executor_v2.py`). sparksim does the same with the real Ray: the cluster, the placement
group, the actors and their deaths are Ray's; only the GPU work is simulated.

- **Refusals as vLLM's**: TP 2 on a one-GPU Spark without the Ray backend is vLLM's
  `World size (2) is larger than the number of available GPUs (1) in this node`; a cluster
  without two GPUs keeps the placement group waiting, with vLLM's "Waiting for creating a
  placement group" lines, until vLLM's 1,800 s (simulated) are up and its `Cannot provide a
  placement group requiring 2 GPUs` ends the start.
- **One rank per node**: each rank is an actor with one GPU of the group; the placement it
  got (node address, pid) is logged, and a rank on a node that has less than two GPUs logs
  vLLM's warning about ranks spread over nodes (a pair always does).
- **Each Spark's memory on that Spark**: a rank's actor keeps its own node's meminfo file
  (the file named by `SPARKSIM_NODE_MEMINFO` in the environment the panel started that Ray
  node with), holding half the weights and half the KV cache; `SPARKSIM_NODE_FAULTS` gives
  that Spark's own faults (a leak on one side only). The API server writes none. The file
  is shared as a single server's is (sparksim/memory.py `HostFootprints`): other servers
  on that Spark count in it, and in the start gate (the fuller Spark's).
- **A dead rank ends the server**: each actor runs a long-lived task, as vLLM's
  `RayWorkerProc` does; a monitor waits on them, and when one ends (its node was killed,
  its process died) the server logs vLLM's `RayWorkerProc rank=[1] died unexpectedly,
  shutting down executor.`, then the engine's death, and exits 1.

Timing for two Sparks is `sparkdomain/planner/link.py` (the engine adds it per step).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass

from sparkdomain.spark import GB
from sparksim.facts import HOST_ENV, NODE_FAULTS_ENV, NODE_MEMINFO_ENV, host_spec
from sparksim.faults import parse_faults
from sparksim.memory import MeminfoWriter, MemoryModel, gb_per_min_to_bytes_per_s
from sparksim.vllm_errors import VllmErrors

log = logging.getLogger("sparksim")

# vLLM's constants (v1/executor/ray_utils.py): the placement group's patience, in seconds
# of the simulated Spark's time, and the first interval of its backing-off wait lines.
PG_WAIT_TIMEOUT_S = 1800
PG_WAIT_INTERVAL_S = 10
MONITOR_INTERVAL_S = 0.5  # wall seconds between looks at the ranks' tasks
GPUS_PER_SPARK = 1


class ExecutorError(Exception):
    """The executor could not start: the message is vLLM's exception line."""


def backend_problem(tp: int, backend: str | None, version: str | None = None) -> str | None:
    """vLLM's ParallelConfig check on a Spark (one GPU): TP above 1 needs Ray (or a
    multi-node `--nnodes` launch, which sparksim does not play). In the imitated version's
    words (its contract)."""
    if tp <= 1 or backend == "ray":
        return None
    return VllmErrors(version).world_size(tp, GPUS_PER_SPARK)


def _ray():
    try:
        import ray
    except ImportError as exc:  # vLLM's assert_ray_available
        raise ExecutorError(
            f"ValueError: Failed to import Ray: {exc}.Please install Ray with `pip install ray`."
        ) from None
    return ray


class _Rank:
    """One rank's worker (a Ray actor on the node its placement put it on): its memory on
    that node's meminfo file, and the long-lived task the executor watches."""

    def __init__(self, rank: int, physical_bytes: int, os_bytes: int, time_scale: float):
        self.rank = rank
        if os.environ.get(HOST_ENV):  # this Spark's own facts, from its node's environment
            spec = host_spec()
            physical_bytes, os_bytes = (
                int(spec.physical_memory_gb * GB),
                int(spec.os_reserve_gb * GB),
            )
        self.started = time.monotonic()
        self.time_scale = time_scale
        faults = parse_faults(
            [s for s in os.environ.get(NODE_FAULTS_ENV, "").split(",") if s.strip()]
        )
        growth = faults.mem_growth_gb_per_min or 0.0
        self.memory = MemoryModel(
            physical_bytes=physical_bytes, os_bytes=os_bytes,
            growth_bytes_per_s=gb_per_min_to_bytes_per_s(growth) if growth else 0.0,
        )  # fmt: skip
        self.growth_from: float | None = None  # growth counts from the server's readiness
        path = os.environ.get(NODE_MEMINFO_ENV, "")
        self.writer = None
        if path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self.writer = MeminfoWriter(path, self.memory, clock=self._sim_elapsed, shared=True)
        self.stop = asyncio.Event()

    def _sim_elapsed(self) -> float:
        if self.growth_from is None:
            return 0.0
        return (time.monotonic() - self.growth_from) * self.time_scale

    async def where(self) -> dict:
        import ray

        return {
            "rank": self.rank,
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "meminfo": bool(self.writer),
            # What other servers on this Spark hold: vLLM's start gate finds it in use.
            "others_bytes": self.writer.others_bytes() if self.writer is not None else 0,
        }

    async def set_footprint(self, nbytes: int) -> None:
        self.memory.set_footprint(nbytes)
        if self.writer is not None:
            self.writer.write_once()

    async def serving(self) -> None:
        """The server is ready: a leak fault starts now, as on one Spark."""
        self.growth_from = time.monotonic()

    async def run(self) -> int:
        """Alive until shut down (the executor watches this task; a dead actor ends it)."""
        while not self.stop.is_set():
            if self.writer is not None:
                with contextlib.suppress(OSError):
                    self.writer.write_once()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.5)
        return self.rank

    async def shutdown(self) -> None:
        if self.writer is None:
            self.memory.release()
        else:
            with contextlib.suppress(OSError):
                self.writer.release()
        self.stop.set()


@dataclass
class _Worker:
    rank: int
    actor: object
    run_ref: object
    ip: str
    node_id: str
    pid: int


class RayExecutor:
    """The driver's side: the cluster, the placement group, the ranks and their monitor."""

    def __init__(
        self, tp: int, *, time_scale: float, physical_bytes: int, os_bytes: int,
        version: str | None = None,
    ):  # fmt: skip
        self.tp, self.time_scale = tp, time_scale
        self.errors = VllmErrors(version)
        self.physical_bytes, self.os_bytes = physical_bytes, os_bytes
        self.instance_id = uuid.uuid4().hex[:5]
        self.workers: list[_Worker] = []
        self.group = None
        self.ray = None
        self.others_bytes = 0  # the most other servers hold on any rank's Spark, at start

    async def start(self) -> None:
        """Join the cluster (RAY_ADDRESS, as vLLM's ray.init does), reserve one GPU per
        rank, place the ranks. Raises ExecutorError with vLLM's words."""
        ray = self.ray = _ray()
        from ray.util.placement_group import placement_group, placement_group_table

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        address = os.environ.get("RAY_ADDRESS") or None
        if address is None:
            raise ExecutorError(
                "ConnectionError: Could not find any running Ray instance. Please specify "
                "the one to connect to by setting `--address` flag or `RAY_ADDRESS` "
                "environment variable."
            )
        # On the loop's thread (about a second). Ray installs its own SIGTERM/SIGINT handlers
        # (exit 15); the server's (a clean stop, exit 0) are put back.
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                     configure_logging=False)  # fmt: skip
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ExecutorError(f"{type(exc).__name__}: {exc}") from None
        finally:
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)
        log.info("Connected to Ray cluster at %s.", address)
        log.info("No current placement group found. Creating a new placement group.")
        gpus = ray.cluster_resources().get("GPU", 0)
        if self.tp > gpus:
            log.warning(
                "The number of required GPUs exceeds the total number of available GPUs in "
                "the placement group."
            )
        specs = [{"GPU": 1.0} for _ in range(self.tp)]
        self.group = placement_group(specs, strategy="PACK")
        await self._wait_for_group(specs)
        table = placement_group_table(self.group)
        per_node: dict[str, int] = {}
        for node in table["bundles_to_node_id"].values():
            per_node[node] = per_node.get(node, 0) + 1
        for node, count in per_node.items():
            if count < self.tp:
                log.warning(
                    "tensor_parallel_size=%d is bigger than a reserved number of GPUs (%d GPUs) "
                    "in a node %s. Tensor parallel workers can be spread out to 2+ nodes which "
                    "can degrade the performance unless you have fast interconnect across "
                    "nodes, like Infiniband. To resolve this issue, make sure you have more "
                    "than %d GPUs available at each node.",
                    self.tp, count, node, self.tp,
                )  # fmt: skip
        await self._place_ranks(table)

    async def _wait_for_group(self, specs: list[dict]) -> None:
        ray = self.ray
        ready = self.group.ready()
        waited, interval = 0.0, PG_WAIT_INTERVAL_S
        while waited < PG_WAIT_TIMEOUT_S:
            wall = min(interval, PG_WAIT_TIMEOUT_S - waited) / self.time_scale
            done, _ = await asyncio.to_thread(ray.wait, [ready], timeout=wall)
            if done:
                return
            waited += min(interval, PG_WAIT_TIMEOUT_S - waited)
            interval *= 2
            log.info(
                "Waiting for creating a placement group of specs for %d seconds. specs=%s. "
                "Check `ray status` and `ray list nodes` to see if you have enough resources, "
                "and make sure the IP addresses used by ray cluster are the same as "
                "VLLM_HOST_IP environment variable specified in each node if you are running "
                "on a multi-node.",
                int(waited), specs,
            )  # fmt: skip
        with contextlib.suppress(Exception):
            ray.util.remove_placement_group(self.group)
        raise ExecutorError(self.errors.no_placement_group(self.tp, specs, PG_WAIT_TIMEOUT_S))

    async def _place_ranks(self, table: dict) -> None:
        ray = self.ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        driver = ray.get_runtime_context().get_node_id()
        bundles = sorted(table["bundles_to_node_id"].items(),
                         key=lambda item: (item[1] != driver, item[1]))  # fmt: skip
        remote = ray.remote(num_cpus=0, num_gpus=1, max_concurrency=8)(_Rank)
        actors = []
        for rank, (bundle, _node) in enumerate(bundles):
            name = f"vllm_Worker_{self.instance_id}_TP{rank}"
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=self.group, placement_group_bundle_index=bundle
            )
            actors.append(
                remote.options(name=name, scheduling_strategy=strategy).remote(
                    rank, self.physical_bytes, self.os_bytes, self.time_scale
                )
            )
        try:
            places = await asyncio.gather(*(actor.where.remote() for actor in actors))
        except Exception as exc:  # a node died while the ranks were placed
            raise ExecutorError(
                f"RuntimeError: Ray workers have not started successfully. {exc}"
            ) from None
        self.others_bytes = max((place.get("others_bytes", 0) for place in places), default=0)
        for actor, place in zip(actors, places, strict=True):
            worker = _Worker(place["rank"], actor, actor.run.remote(), place["ip"],
                             place["node_id"], place["pid"])  # fmt: skip
            self.workers.append(worker)
            log.info(
                "world_size=%d rank=%d local_rank=0 distributed_init_method=tcp://%s backend=nccl"
                " (RayWorkerProc pid=%d, ip=%s)",
                self.tp, place["rank"], os.environ.get("VLLM_HOST_IP", "") or place["ip"],
                place["pid"], place["ip"],
            )  # fmt: skip

    def log_prefix(self) -> str:
        """What Ray puts before a line rank 0 logs (it runs on the driver's node), as in
        vLLM's log of a pair: `(RayWorkerProc pid=1234) `."""
        first = self.workers[0]
        return f"(RayWorkerProc pid={first.pid}) "

    def set_footprint(self, nbytes: int) -> None:
        """Each rank holds `nbytes` on its own Spark (fire and forget: ordered per actor)."""
        for worker in self.workers:
            worker.actor.set_footprint.remote(int(nbytes))

    def serving(self) -> None:
        for worker in self.workers:
            worker.actor.serving.remote()

    def dead_ranks(self) -> list[int]:
        """Ranks whose long-lived task has ended (their actor died); non-blocking."""
        refs = {w.run_ref: w.rank for w in self.workers}
        if not refs:
            return []
        done, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=0)
        return sorted(refs[ref] for ref in done)

    async def monitor(self) -> list[int]:
        """Wait until a rank dies; vLLM's RayWorkerMonitor. Returns the dead ranks."""
        while True:
            dead = await asyncio.to_thread(self.dead_ranks)
            if dead:
                log.error("RayWorkerProc rank=%s died unexpectedly, shutting down executor.", dead)
                return dead
            await asyncio.sleep(MONITOR_INTERVAL_S)

    def shutdown(self) -> None:
        """Free each rank's memory and end its task, then leave the cluster."""
        if self.ray is None or not self.ray.is_initialized():
            return
        with contextlib.suppress(Exception):
            self.ray.get([w.actor.shutdown.remote() for w in self.workers], timeout=5)
        for worker in self.workers:
            with contextlib.suppress(Exception):
                self.ray.kill(worker.actor)
        if self.group is not None:
            with contextlib.suppress(Exception):
                self.ray.util.remove_placement_group(self.group)
        with contextlib.suppress(Exception):
            self.ray.shutdown()

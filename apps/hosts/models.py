from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from apps.core.queues import host_queue
from apps.hosts.engines.docker import MAX_SHM_GIB, SIM_BASE_IMAGE, image_allowed, split_image
from sparkdomain import planner, spark
from sparkdomain.flags import IMAGE, is_hub_model
from sparkdomain.images import OFFICIAL_IMAGES_TEXT
from sparkdomain.meminfo import MeminfoError, Memory, read_meminfo
from sparkdomain.model_refs import model_folders_problem, server_model_dirs, split_model_folder
from sparkdomain.spark import GB, GIB
from sparksim.faults import FaultSpecError, parse_faults
from vllm_adapter import contract as vllm_contract

HOST_NAME = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$",
    "Use lowercase letters, digits and dashes (like a DNS name): it names the host's Celery queue.",
)
HEARTBEAT_STALE = timedelta(seconds=90)
AGENT_STALE = timedelta(seconds=5)
SIM_MEMINFO_FRESH_S = 5.0
# Models side by side on one Spark at most (co-location: apps/runs/colocation.py).
MAX_RUNS_PER_HOST = 4


def age_words(age: timedelta) -> str:
    """How long ago, for people: "40 s", "12 min", "3 h", "2 days"."""
    seconds = max(0, int(age.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} days"


def validate_image_patterns(value) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValidationError("A list of image references; a trailing * matches any tag.")
    for pattern in value:
        if not IMAGE.match(pattern.rstrip("*").rstrip(":") or "x"):
            raise ValidationError(f"{pattern!r} is not an image reference pattern.")


def validate_model_folders(value) -> None:
    problem = model_folders_problem(value)
    if problem:
        raise ValidationError(f"Model folders: {problem}.")


class HostQuerySet(models.QuerySet):
    def online(self):
        return self.filter(last_heartbeat__gte=timezone.now() - HEARTBEAT_STALE)

    def in_service(self):
        """The hosts a start, a benchmark job or a load may name: not retired."""
        return self.filter(retired_at__isnull=True)

    def retired(self):
        return self.filter(retired_at__isnull=False)

    def default(self):
        """The host a recipe is checked and shown for when no host is named: the first."""
        return self.order_by("name").first()

    def model_dirs(self) -> tuple[str, ...]:
        """Every host's model directories: where a recipe's local model or tokenizer may
        lie before a host is chosen (each start checks its own host's again)."""
        return tuple(sorted({d for host in self for d in host.model_dirs()}))

    def image_allowed_somewhere(self, image: str) -> bool:
        """Whether any host would start `image` (no host yet: whether a new one would, with
        its empty allowlist)."""
        hosts = list(self)
        if not hosts:
            return image_allowed([], image)
        return any(host.image_allowed(image) for host in hosts)


def validate_vllm_version(value: str) -> None:
    if value and value not in vllm_contract.available_versions():
        known = ", ".join(vllm_contract.available_versions())
        raise ValidationError(f"SparkPanel has no contract for vLLM {value} (it knows {known}).")


class Host(models.Model):
    """One DGX Spark (or a simulated one) and everything the panel may do on it.

    Only admins edit hosts: mounts, images and ports are decided here, never by a recipe.
    """

    class Engine(models.TextChoices):
        DOCKER = "docker", "Docker (vLLM container)"
        PROCESS = "process", "Local process (sparksim, or a native vllm)"

    class DockerNetwork(models.TextChoices):
        BRIDGE = "bridge", "Own network, port published"
        HOST = "host", "The host's network"

    class SimAnswers(models.TextChoices):
        PROSE = "prose", "Plain prose"
        MARKDOWN = "markdown", "Markdown (demo)"

    name = models.CharField(max_length=63, unique=True, validators=[HOST_NAME])
    vllm_version = models.CharField(
        "vLLM version", max_length=32, blank=True, validators=[validate_vllm_version],
        help_text="The vLLM version of this host's images. Recipes are checked against its "
        "own parser and registries (vllm_adapter/contracts). Blank: the newest SparkPanel "
        "knows.",
    )  # fmt: skip
    description = models.CharField(max_length=200, blank=True)
    engine = models.CharField(max_length=16, choices=Engine.choices, default=Engine.DOCKER)
    simulated = models.BooleanField(
        default=False, help_text="Run sparksim instead of vLLM (process engine only)."
    )
    sim_time_scale = models.FloatField(
        "simulation speed", default=1.0,
        validators=[MinValueValidator(0.01), MaxValueValidator(1000)],
        help_text="sparksim's --time-scale: 1 is real time; 20 runs twenty times faster.",
    )  # fmt: skip
    docker_url = models.CharField(
        "Docker endpoint", max_length=200, default="unix:///var/run/docker.sock", blank=True
    )
    gpus = models.BooleanField("request GPUs", default=True)
    docker_network = models.CharField(
        "container network", max_length=8, choices=DockerNetwork.choices,
        default=DockerNetwork.BRIDGE,
        help_text="Bridge: the container has its own network and the run's port is published. "
        "Host: the container shares the Spark's network (vLLM binds the address for clients).",
    )  # fmt: skip
    shm_size_gib = models.FloatField(
        "shared memory (GiB)", default=16,
        validators=[MinValueValidator(0.5), MaxValueValidator(MAX_SHM_GIB)],
        help_text="The container's /dev/shm (never the host's IPC namespace).",
    )  # fmt: skip
    sim_faults = models.CharField(
        "simulated faults",
        max_length=300,
        blank=True,
        help_text="sparksim --fault specs, comma-separated, for demos and drills — e.g. "
        "“mem-growth:2” (a leak that trips the memory watchdog). Simulated hosts only.",
    )
    sim_answers = models.CharField(
        "simulated answers", max_length=8, choices=SimAnswers.choices,
        default=SimAnswers.PROSE,
        help_text="sparksim --answers: plain English prose, or Markdown — a demo mode whose "
        "answers hold headings, lists, tables, code and math, so the chat shows all it "
        "renders (make run's Sparks use it). Simulated hosts only.",
    )  # fmt: skip
    sim_image = models.CharField(
        "simulation image", max_length=255, blank=True, default=SIM_BASE_IMAGE,
        help_text="Simulated Docker hosts run sparksim in this image instead of the recipe's "
        f"(the default, {SIM_BASE_IMAGE}, is an empty image the panel creates itself).",
    )  # fmt: skip
    hf_cache_path = models.CharField(
        "Hugging Face cache on the host", max_length=300, blank=True,
        help_text="The Hugging Face home on this Spark (it holds hub/): its worker downloads a "
        "recipe's weights here before the start, with progress, and vLLM reads them offline "
        "(mounted into containers at /root/.cache/huggingface; a local server's HF_HOME). "
        "Blank: vLLM downloads them itself, inside the load. Set by an admin; recipes can "
        "never add mounts.",
    )  # fmt: skip
    model_folders = models.JSONField(
        default=list, blank=True, validators=[validate_model_folders],
        help_text='Folders of models on this Spark that containers see, read-only, e.g. '
        '["/home/me/models/Laguna-S-2.1-DFlash:/drafter"] (HOST_FOLDER:CONTAINER_PATH; one '
        "path for both on a local server). A recipe may then read a model, draft or tokenizer "
        "there — sparkrun recipes mount such folders with `volumes`, which SparkPanel never "
        "takes from a recipe. Set by an admin; never a system directory.",
    )  # fmt: skip
    image_allowlist = models.JSONField(
        default=list, blank=True, validators=[validate_image_patterns],
        help_text='Images runs may use, e.g. ["vllm/vllm-openai:*", '
        '"nvcr.io/nvidia/vllm:25.09-py3"] (a trailing * matches any tag); when it names any '
        "image, only those. Empty: only the official vLLM images (vllm/vllm-openai and "
        "nvcr.io/nvidia/vllm, any tag).",
    )  # fmt: skip
    advertise_host = models.CharField(
        "address for clients", max_length=200, default="127.0.0.1",
        help_text="Where the panel reaches the host's vLLM servers.",
    )  # fmt: skip
    port_min = models.PositiveIntegerField(default=8100, validators=[MinValueValidator(1024)])
    port_max = models.PositiveIntegerField(default=8199, validators=[MaxValueValidator(65535)])
    physical_memory_gb = models.FloatField(default=spark.PHYSICAL_MEMORY_GB)
    cuda_visible_gib = models.FloatField(default=spark.CUDA_VISIBLE_GIB)
    bandwidth_gbs = models.FloatField(default=spark.BANDWIDTH_GBS)
    os_reserve_gb = models.FloatField(default=spark.OS_RESERVE_GB)
    cuda_context_gb = models.FloatField(default=spark.CUDA_CONTEXT_GB)
    cuda_graphs_gb = models.FloatField(default=spark.CUDA_GRAPHS_GB)
    meminfo_path = models.CharField(
        "meminfo source", max_length=300, blank=True,
        help_text="Default /proc/meminfo; a simulated host uses the file sparksim writes.",
    )  # fmt: skip
    # The memory guard's lines, MemAvailable in GB like the seed and the planner (one set of
    # rules: the planner's "fits" keeps the warn line free, admission the act line).
    watchdog_warn_gb = models.FloatField(
        "warn below (GB available)", default=spark.WATCHDOG_WARN_GB,
        validators=[MinValueValidator(0.1)],
        help_text=f"A warning, a banner and an incident below this much MemAvailable. Default "
        f"{spark.WATCHDOG_WARN_GB:g} GB: a stock Spark at 0.90 keeps 4.4 GB free by design.",
    )  # fmt: skip
    watchdog_act_gb = models.FloatField(
        "stop the run below (GB available)", default=spark.WATCHDOG_ACT_GB,
        validators=[MinValueValidator(0.1)],
        help_text=f"The run is stopped below this much MemAvailable. Default "
        f"{spark.WATCHDOG_ACT_GB:g} GB, the top of the seed's 2–3 GB freeze band.",
    )  # fmt: skip
    max_runs = models.PositiveSmallIntegerField(
        "models at once", default=1,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RUNS_PER_HOST)],
        help_text=f"How many models may run on this Spark side by side (1 … {MAX_RUNS_PER_HOST}). "
        "More than one only when their vLLM pools fit together: the sum of their "
        "utilizations stays at or under 0.90, each start passes vLLM's free-memory gate with "
        "the freeze margin left over, and one starts at a time (docs/runs.md, Several models "
        "on one Spark). 1: one model at a time.",
    )  # fmt: skip
    drop_page_cache = models.BooleanField(
        "drop the page cache before a start", default=False,
        help_text="On a GB10 the free memory vLLM's start gate sees is MemAvailable, and page "
        "cache the kernel will not give back counts against it; NVIDIA advises dropping it "
        "before a start. The host's worker then syncs and writes 3 to "
        "/proc/sys/vm/drop_caches before each start (it needs that right: docs/deploy.md). "
        "Off by default; every drop is in the audit log.",
    )  # fmt: skip
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    heartbeat_worker = models.CharField(max_length=200, blank=True)
    # The host agent (manage.py hostagent): when it last reported, and its last sample.
    agent_seen_at = models.DateTimeField(null=True, blank=True)
    agent_sample = models.JSONField(default=dict, blank=True)
    agent_error = models.CharField(max_length=300, blank=True)
    # What the host's worker last found running there that the panel did not start.
    unmanaged = models.JSONField(default=list, blank=True)
    inventory_at = models.DateTimeField(null=True, blank=True)
    inventory_error = models.CharField(max_length=300, blank=True)
    # What the Spark's Hugging Face cache holds, as its worker's last scan saw it
    # (apps/runs/weights.py: models, revisions, sizes, the volume's free space).
    weights_cache = models.JSONField(default=dict, blank=True)
    weights_cache_at = models.DateTimeField(null=True, blank=True)
    weights_cache_error = models.CharField(max_length=300, blank=True)
    # Retired (apps/hosts/services.py::host_retire): no new runs, jobs or loads; its runs,
    # jobs, incidents and usage stay (a host with runs cannot be deleted: PROTECT).
    retired_at = models.DateTimeField(null=True, blank=True, editable=False)
    retired_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, editable=False,
        on_delete=models.SET_NULL, related_name="+",
    )  # fmt: skip

    objects = HostQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(port_min__lte=F("port_max")), name="host_port_range_ordered"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.sim_faults:
            try:
                parse_faults(self.fault_specs())
            except FaultSpecError as exc:
                raise ValidationError({"sim_faults": str(exc)}) from None
        if self.watchdog_act_gb >= self.watchdog_warn_gb:
            raise ValidationError({"watchdog_act_gb": "Act below a lower level than the warning."})
        if self.engine == self.Engine.PROCESS and not model_folders_problem(self.model_folders):
            moved = [e for e in self.model_folders if len(set(split_model_folder(e))) > 1]
            if moved:
                raise ValidationError({"model_folders": (
                    f"{moved[0]}: a local server has no container; it reads the folder where "
                    "it lies — give one path."
                )})  # fmt: skip

    @property
    def watchdog_warn_bytes(self) -> int:
        return int(self.watchdog_warn_gb * GB)

    @property
    def watchdog_act_bytes(self) -> int:
        return int(self.watchdog_act_gb * GB)

    # The lines in GiB, for code that reads them so (the watchdog counts bytes).
    @property
    def watchdog_warn_gib(self) -> float:
        return self.watchdog_warn_gb * GB / GIB

    @property
    def watchdog_act_gib(self) -> float:
        return self.watchdog_act_gb * GB / GIB

    @property
    def queue(self) -> str:
        return host_queue(self.name)

    @property
    def agent_live(self) -> bool:
        return self.agent_seen_at is not None and timezone.now() - self.agent_seen_at < AGENT_STALE

    @property
    def online(self) -> bool:
        return (
            self.last_heartbeat is not None
            and timezone.now() - self.last_heartbeat < HEARTBEAT_STALE
        )

    @property
    def offline_words(self) -> str:
        """ "offline: no worker seen for 12 min" (the start and queue forms' options); ""
        while a worker consumes the host's queue."""
        if self.online:
            return ""
        if self.last_heartbeat is None:
            return "offline: no worker seen yet"
        return f"offline: no worker seen for {age_words(timezone.now() - self.last_heartbeat)}"

    @property
    def retired(self) -> bool:
        return self.retired_at is not None

    def retired_refusal(self) -> str | None:
        """Why a start, a benchmark job or a load may not name this host (None: it may)."""
        if self.retired_at is None:
            return None
        by = f" by {self.retired_by.get_username()}" if self.retired_by else ""
        when = timezone.localtime(self.retired_at).strftime("%Y-%m-%d %H:%M")
        return (
            f"{self.name} is retired (since {when}{by}): it takes no new runs, benchmark jobs "
            f"or model loads. Choose another Spark, or an admin brings {self.name} back on its "
            "page (Hosts)."
        )

    @property
    def contract_version(self) -> str:
        return self.vllm_version or vllm_contract.latest_version()

    def spec(self) -> planner.HostSpec:
        return planner.HostSpec(
            physical_memory_gb=self.physical_memory_gb,
            cuda_visible_gib=self.cuda_visible_gib,
            bandwidth_gbs=self.bandwidth_gbs,
            os_reserve_gb=self.os_reserve_gb,
            cuda_context_gb=self.cuda_context_gb,
            cuda_graphs_gb=self.cuda_graphs_gb,
            freeze_margin_gb=self.watchdog_act_gb,
            warn_margin_gb=self.watchdog_warn_gb,
        )

    def meminfo_file(self) -> Path:
        if self.meminfo_path:
            return Path(self.meminfo_path)
        if self.simulated:
            return self.sim_state_dir() / "meminfo"
        return Path("/proc/meminfo")

    def memory(self) -> Memory:
        """Measured memory. A simulated host with no run has written no file yet: it is an
        idle Spark (everything but the OS reserve free)."""
        path = self.meminfo_file()
        if self.simulated and not self.meminfo_path:
            # sparksim rewrites its file 20 times a second while it runs; an old or missing
            # file means no simulated server holds memory (it may have crashed).
            try:
                fresh = time.time() - path.stat().st_mtime < SIM_MEMINFO_FRESH_S
            except OSError:
                fresh = False
            if not fresh:
                total = int(self.physical_memory_gb * GB)
                return Memory(total, total - int(self.os_reserve_gb * GB))
        return read_meminfo(path)

    def measured_memory(self) -> tuple[Memory, str]:
        """The host's memory as the panel should judge it, and where it came from: the host
        agent's latest sample when the agent is live (it runs ON the Spark — the only right
        answer for a second Spark), else a reading from this process (right for this
        machine and for simulated hosts)."""
        sample = self.agent_sample or {}
        if self.agent_live and sample.get("mem_total") and sample.get("mem_available") is not None:
            return Memory(int(sample["mem_total"]), int(sample["mem_available"])), "agent"
        return self.memory(), "panel"

    def free_gib(self) -> float | None:
        """The free memory CUDA will see on this host now — on a GB10 the kernel's
        MemAvailable (vLLM's start gate) — from `measured_memory`; None without a reading."""
        try:
            memory, _source = self.measured_memory()
        except MeminfoError:
            return None
        return memory.available_bytes / GIB

    def weights_not_downloaded(self, model_id: str) -> str | None:
        """Why the panel does not download this model before a start here (vLLM then reads
        a local path, or downloads inside the server) — None when it does (docs/weights.md)."""
        if not is_hub_model(model_id):
            return "the model is a path inside the server, not a Hugging Face id"
        if not self.hf_cache_path and self.simulated:
            return (
                f"{self.name} is simulated and has no Hugging Face cache set: sparksim needs "
                "no weights (set a cache to try downloads on it)"
            )
        if not self.hf_cache_path:
            return (
                f"{self.name} has no Hugging Face cache set (an admin sets it on the host): "
                "vLLM downloads the weights itself, inside the load, without progress"
            )
        return None

    def cached_model(self, model_id: str) -> dict | None:
        """The last cache scan's entry for a model, or None."""
        models_ = (self.weights_cache or {}).get("models", [])
        return next((m for m in models_ if m.get("repo") == model_id), None)

    def fault_specs(self) -> list[str]:
        return [spec.strip() for spec in self.sim_faults.split(",") if spec.strip()]

    def image_allowed(self, image: str) -> bool:
        return image_allowed(self.image_allowlist, image)

    def image_refusal(self, image: str) -> str | None:
        """Why this host does not start `image`, and how an admin allows it (None: it does).
        The allowlist speaks of the recipe's image on simulated hosts too: the simulation
        refuses what the Spark would (apps/hosts/engines/docker.py::container_config)."""
        if self.image_allowed(image):
            return None
        rule = (
            f"its image allowlist names only {', '.join(self.image_allowlist)}"
            if self.image_allowlist
            else f"its image allowlist is empty, which allows only {OFFICIAL_IMAGES_TEXT}"
        )
        return (
            f"{self.name} does not allow the image {image}: {rule}. An admin allows it by "
            f"adding it (or a pattern such as {split_image(image.partition('@')[0])[0]}:*) to "
            f"{self.name}'s image allowlist (Django admin → Hosts)."
        )

    def model_dirs(self) -> tuple[str, ...]:
        """Where a recipe's local model or tokenizer may lie on this host, as its server
        sees it: the Hugging Face cache an admin set (a container's mount of it, or a local
        server's HF_HOME) and its model folders. None set: Hub ids only. The engines judge
        the same directories."""
        return server_model_dirs(
            self.hf_cache_path, in_container=self.engine == self.Engine.DOCKER,
            folders=self.model_folders or (),
        )  # fmt: skip

    def model_folder_at(self, path: str) -> str | None:
        """The model folder that holds `path` as the server sees it, or None."""
        in_container = self.engine == self.Engine.DOCKER
        for entry in self.model_folders or ():
            source, target = split_model_folder(entry)
            where = target if in_container else source
            if path == where or path.startswith(where + "/"):
                return where
        return None

    def sim_state_dir(self) -> Path:
        """Where sparksim writes this simulated host's memory (mounted into its container)."""
        return Path(settings.VAR_DIR) / "hosts" / self.name


IFNAME = RegexValidator(
    r"^[A-Za-z0-9._-]{1,15}$", "A Linux interface name (up to 15 letters, digits, . _ -)."
)


class SparkPair(models.Model):
    """Two Sparks linked by their ConnectX cable, serving one model with tensor parallel 2
    (docs/two-sparks.md). The head runs the Ray head and the API server; the worker joins
    its Ray cluster. Each side's own worker (its own Celery queue) does its half. Only
    admins link hosts: addresses and interfaces are decided here, never by a recipe."""

    name = models.CharField(max_length=63, unique=True, validators=[HOST_NAME])
    head = models.OneToOneField(
        Host, on_delete=models.PROTECT, related_name="pair_as_head",
        help_text="Runs the Ray head and vLLM's API server; clients and the gateway reach the "
        "model on this host's address.",
    )  # fmt: skip
    worker = models.OneToOneField(
        Host, on_delete=models.PROTECT, related_name="pair_as_worker",
        help_text="Joins the head's Ray cluster with its GPU.",
    )  # fmt: skip
    head_link_address = models.GenericIPAddressField(
        "head's address on the link", protocol="IPv4",
        help_text="The head's address on the ConnectX link: Ray's node address, NCCL's and "
        "vLLM's (VLLM_HOST_IP) on that side.",
    )  # fmt: skip
    worker_link_address = models.GenericIPAddressField(
        "worker's address on the link", protocol="IPv4",
        help_text="The worker's address on the ConnectX link.",
    )  # fmt: skip
    ray_port = models.PositiveIntegerField(
        "Ray port", default=6379, validators=[MinValueValidator(1024), MaxValueValidator(65535)],
        help_text="The Ray head's GCS port on the head's link address.",
    )  # fmt: skip
    nccl_interface = models.CharField(
        "NCCL interface", max_length=15, blank=True, validators=[IFNAME],
        help_text="The ConnectX interface on both Sparks (NCCL_SOCKET_IFNAME and "
        "GLOO_SOCKET_IFNAME), e.g. enp1s0f1np1. Blank on simulated pairs.",
    )  # fmt: skip
    link_mtu = models.PositiveIntegerField(
        "expected MTU", null=True, blank=True,
        validators=[MinValueValidator(576), MaxValueValidator(9216)],
        help_text="When set, each side's worker checks that its NCCL interface has this MTU "
        "before it starts its Ray node (9000 on a jumbo-frame link); blank skips the check.",
    )  # fmt: skip
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=~Q(head=F("worker")), name="pair_of_two_hosts"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.head} + {self.worker})"

    @property
    def hosts(self) -> tuple[Host, Host]:
        return self.head, self.worker

    def side_of(self, host: Host) -> str:
        return "head" if host.pk == self.head_id else "worker"

    def link_address(self, host: Host) -> str:
        return self.head_link_address if host.pk == self.head_id else self.worker_link_address

    @property
    def ray_address(self) -> str:
        return f"{self.head_link_address}:{self.ray_port}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.head_id and self.head_id == self.worker_id:
            errors["worker"] = "A pair is two different Sparks."
        if self.head_link_address and self.head_link_address == self.worker_link_address:
            errors["worker_link_address"] = "Each side has its own address on the link."
        for field in ("head", "worker"):
            host_id = getattr(self, f"{field}_id")
            if not host_id:
                continue
            other = (
                SparkPair.objects.exclude(pk=self.pk)
                .filter(Q(head_id=host_id) | Q(worker_id=host_id))
                .first()
            )
            if other is not None:
                errors[field] = f"{getattr(self, field).name} is already in the pair {other.name}."
        for field in ("head", "worker"):
            if getattr(self, f"{field}_id") and field not in errors:
                side = getattr(self, field)
                if side.retired:
                    errors[field] = f"{side.name} is retired: an admin brings it back first."
        if self.head_id and self.worker_id and not errors:
            head, worker = self.head, self.worker
            if (head.engine, head.simulated) != (worker.engine, worker.simulated):
                errors["worker"] = (
                    "Both Sparks of a pair use the same engine (both Docker or both local "
                    "processes, both simulated or both real)."
                )
            elif head.simulated and head.sim_time_scale != worker.sim_time_scale:
                errors["worker"] = (
                    f"A simulated pair runs at one speed: {head.name} is at "
                    f"{head.sim_time_scale:g}×, {worker.name} at {worker.sim_time_scale:g}×."
                )
            elif head.contract_version != worker.contract_version:
                errors["worker"] = (
                    f"Both Sparks need the same vLLM (and so the same Ray): {head.name} has "
                    f"{head.contract_version}, {worker.name} {worker.contract_version}."
                )
        if errors:
            raise ValidationError(errors)


def pair_of(host: Host) -> SparkPair | None:
    """The pair a host belongs to (as head or worker), or None."""
    return (
        SparkPair.objects.select_related("head", "worker")
        .filter(Q(head=host) | Q(worker=host))
        .first()
    )

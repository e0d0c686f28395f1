from django.contrib import admin

from apps.hosts.models import Host, SparkPair


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["name", "engine", "simulated", "advertise_host", "last_heartbeat", "retired_at"]
    list_filter = ["engine", "simulated", ("retired_at", admin.EmptyFieldListFilter)]
    # Retiring is done on the host's page (audited as host.retire / host.return).
    readonly_fields = [
        "last_heartbeat", "heartbeat_worker", "unmanaged", "inventory_at", "inventory_error",
        "retired_at", "retired_by",
    ]  # fmt: skip
    fieldsets = [
        (None, {"fields": ["name", "description", "engine", "vllm_version", "advertise_host",
                           ("port_min", "port_max"), "max_runs"]}),
        ("Docker", {
            "description": "The container template is fixed; these are the only choices. "
            "Recipes can never add mounts, devices or privileges.",
            "fields": ["docker_url", "gpus", "docker_network", "shm_size_gib", "hf_cache_path",
                       "model_folders", "image_allowlist"],
        }),
        ("Simulation (sparksim instead of vLLM)", {
            "fields": ["simulated", "sim_time_scale", "sim_image", "sim_faults", "sim_answers"],
        }),
        ("Memory and bandwidth (the planner's inputs)", {
            "fields": ["physical_memory_gb", "cuda_visible_gib", "bandwidth_gbs", "os_reserve_gb",
                       "cuda_context_gb", "cuda_graphs_gb", "meminfo_path"],
        }),
        ("Memory guard (MemAvailable, GB; docs/telemetry.md)", {
            "fields": ["watchdog_warn_gb", "watchdog_act_gb", "drop_page_cache"]}),
        ("Seen by the worker", {
            "fields": ["last_heartbeat", "heartbeat_worker", "inventory_at", "unmanaged",
                       "inventory_error"],
        }),
        ("Retired (on the host's page)", {"fields": ["retired_at", "retired_by"]}),
    ]  # fmt: skip


@admin.register(SparkPair)
class SparkPairAdmin(admin.ModelAdmin):
    """Two Sparks linked by ConnectX serve tensor-parallel-2 recipes (docs/two-sparks.md)."""

    list_display = ["name", "head", "worker", "head_link_address", "worker_link_address",
                    "ray_port", "nccl_interface"]  # fmt: skip
    fieldsets = [
        (None, {
            "description": "A recipe with tensor parallel 2 runs only on a pair: the head runs "
            "the Ray head and vLLM's API server, the worker joins with its GPU. Each Spark's "
            "own worker does its half; both must be idle to start. docs/two-sparks.md has "
            "the cabling and network checklist.",
            "fields": ["name", ("head", "worker")],
        }),
        ("The ConnectX link", {
            "fields": [("head_link_address", "worker_link_address"), "ray_port",
                       "nccl_interface", "link_mtu"],
        }),
    ]  # fmt: skip

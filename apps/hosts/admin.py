from django.contrib import admin

from apps.hosts.models import Host


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["name", "engine", "simulated", "advertise_host", "last_heartbeat"]
    list_filter = ["engine", "simulated"]
    readonly_fields = [
        "last_heartbeat", "heartbeat_worker", "unmanaged", "inventory_at", "inventory_error"
    ]  # fmt: skip
    fieldsets = [
        (None, {"fields": ["name", "description", "engine", "vllm_version", "advertise_host",
                           ("port_min", "port_max")]}),
        ("Docker", {
            "description": "The container template is fixed; these are the only choices. "
            "Recipes can never add mounts, devices or privileges.",
            "fields": ["docker_url", "gpus", "docker_network", "shm_size_gib", "hf_cache_path",
                       "image_allowlist"],
        }),
        ("Simulation (sparksim instead of vLLM)", {
            "fields": ["simulated", "sim_time_scale", "sim_image", "sim_faults"],
        }),
        ("Memory and bandwidth (the planner's inputs)", {
            "fields": ["physical_memory_gb", "cuda_visible_gib", "bandwidth_gbs", "os_reserve_gb",
                       "cuda_context_gb", "cuda_graphs_gb", "meminfo_path"],
        }),
        ("Memory guard (MemAvailable, GB; docs/telemetry.md)", {
            "fields": ["watchdog_warn_gb", "watchdog_act_gb"]}),
        ("Seen by the worker", {
            "fields": ["last_heartbeat", "heartbeat_worker", "inventory_at", "unmanaged",
                       "inventory_error"],
        }),
    ]  # fmt: skip

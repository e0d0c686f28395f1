from django.contrib import admin

from apps.hosts.models import Host


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["name", "engine", "simulated", "advertise_host", "last_heartbeat"]
    list_filter = ["engine", "simulated"]
    readonly_fields = ["last_heartbeat", "heartbeat_worker"]

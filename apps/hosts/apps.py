from django.apps import AppConfig


class HostsConfig(AppConfig):
    name = "apps.hosts"
    label = "hosts"
    verbose_name = "Hosts (Sparks)"

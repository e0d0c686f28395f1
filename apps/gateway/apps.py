from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "apps.gateway"
    label = "gateway"
    verbose_name = "Gateway (/v1)"

    def ready(self) -> None:
        from apps.gateway import receivers

        receivers.connect()

from django.apps import AppConfig


class OverviewConfig(AppConfig):
    """The top app: pages and endpoints that look across every app.

    What belongs here composes several apps and so sits above all of them: the dashboard
    (hosts, their active runs, telemetry and the team notices), the 500 page (the API's
    JSON error for /api/), the panel's own Prometheus /metrics (runs, benchmark jobs, hosts,
    incidents), the telemetry sockets and back-fill JSON (they look up a Host or a Run) and
    the seed_demo command (an admin account and a simulated host). Nothing below imports it;
    it has no models. A page or endpoint that needs only one app belongs in that app.
    """

    name = "apps.overview"
    label = "overview"
    verbose_name = "Overview"

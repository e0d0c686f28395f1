"""What the telemetry app tells the rest of the panel (Django signals; the API app's
webhooks listen in ``apps/api/apps.py``).

``incident_recorded(sender=Incident, incident=incident)``: the host agent stored an
incident (a watchdog warning or kill); receivers must not raise.
"""

from django.dispatch import Signal

incident_recorded = Signal()

"""Celery tasks of the API app (autodiscovered by sparkpanel/celery.py).

`api.deliver_webhook` (one attempt at a webhook delivery) is defined beside the code it
runs, in apps/api/webhooks/delivery.py; it runs on the light `default` queue, never on a
host's queue, so a slow receiver never delays a Spark's runs or jobs.
"""

from apps.api.email_alerts import send_alert
from apps.api.webhooks.delivery import deliver

__all__ = ["deliver", "send_alert"]

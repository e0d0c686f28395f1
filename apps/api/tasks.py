"""Celery tasks of the API app (autodiscovered by sparkpanel/celery.py)."""

from celery import shared_task

from apps.api import webhooks

# Webhook deliveries are light: they run on the `default` queue (webhooks._schedule),
# never on a host's queue, so a slow receiver never delays a Spark's runs or jobs.


@shared_task(name="api.deliver_webhook", acks_late=True, ignore_result=True)
def deliver(delivery_id: int) -> str | None:
    """One attempt at a webhook delivery; it schedules the next one itself on failure."""
    return webhooks.attempt(delivery_id)

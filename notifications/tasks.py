"""Celery tasks: one per committed batch of job events, one per webhook delivery (retried with backoff)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from notifications import services
from notifications.models import Delivery

#: Tries of a webhook delivery in all, and the first retry's delay; each retry waits twice as long.
MAX_TRIES = 6
FIRST_RETRY_S = 2.0


@shared_task(name="notifications.dispatch", ignore_result=True)
def dispatch(event_ids: list[int]) -> None:
    for delivery_id in services.dispatch([int(i) for i in event_ids]):
        deliver_webhook.apply_async(args=[delivery_id], queue=settings.NOTIFICATIONS_QUEUE)


@shared_task(name="notifications.deliver_webhook", bind=True, ignore_result=True, max_retries=MAX_TRIES - 1)
def deliver_webhook(self, delivery_id: int) -> None:  # noqa: ANN001
    delivery = Delivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None or delivery.status in (Delivery.Status.DELIVERED, Delivery.Status.FAILED,
                                               Delivery.Status.REFUSED):
        return  # deleted, or a redelivered message of a delivery already settled
    outcome = services.send_webhook(delivery, last_try=self.request.retries >= MAX_TRIES - 1)
    if outcome == services.Outcome.RETRY:
        raise self.retry(countdown=backoff(self.request.retries))


def backoff(retries: int) -> float:
    """Seconds before retry number ``retries + 1``: 2, 4, 8, 16, 32."""
    return FIRST_RETRY_S * 2 ** retries

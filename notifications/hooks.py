"""From the scheduler's job-event writes to one queued task per transaction (never inside it).

Every JobEvent is written by ``scheduler.transitions``: one at a time with
``create()`` (a ``post_save`` signal) or in batches with ``bulk_create`` (the
``events_recorded`` signal it sends). Here the events that can notify someone
are kept, and ``transaction.on_commit`` enqueues ``tasks.dispatch`` with
their ids: nothing is sent for a rolled-back transition, and the writer (the
scheduling loop included) spends one broker publish after its commit, never a
mail server's or a webhook's time.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction

from notifications.events import kind_of

log = logging.getLogger(__name__)


def _anyone_listens(event_ids: list[int]) -> bool:
    """True when some event's job, or its owner, has chosen notifications, or its project has a webhook
    (nothing is sent otherwise)."""
    from django.db.models import Q

    from scheduler.models import JobEvent

    chosen = (Q(job__notify_preference__isnull=False) | Q(job__owner__notify_preference__isnull=False)
              | Q(job__project__webhooks__active=True))
    return JobEvent.objects.filter(pk__in=event_ids).filter(chosen).exists()


def _enqueue(event_ids: list[int]) -> None:
    from notifications.tasks import dispatch

    try:
        # One indexed query after the commit spares the broker a task per job event on a site (or for users)
        # that never chose notifications, which is every event until someone does.
        if not _anyone_listens(event_ids):
            return
        dispatch.apply_async(args=[event_ids], queue=settings.NOTIFICATIONS_QUEUE)
    except Exception:  # a broker outage must not fail the commit's other callbacks
        log.exception("could not queue notifications for job events %s", event_ids[:10])


def events_written(events: list[Any]) -> None:
    """Queue the notifiable ``events`` (saved JobEvents) after the current transaction commits."""
    ids = [e.pk for e in events if e.pk is not None and kind_of(e.from_state, e.to_state, e.reason)]
    if ids:
        transaction.on_commit(lambda: _enqueue(ids))


def _on_event_saved(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if created and not raw:
        events_written([instance])


def _on_events_recorded(sender: Any, events: list[Any], **kwargs: Any) -> None:
    events_written(events)


def connect() -> None:
    from django.db.models.signals import post_save

    from scheduler.models import JobEvent
    from scheduler.transitions import events_recorded

    post_save.connect(_on_event_saved, sender=JobEvent, dispatch_uid="notifications.event_saved")
    events_recorded.connect(_on_events_recorded, dispatch_uid="notifications.events_recorded")

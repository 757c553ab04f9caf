"""Asking for a scheduling cycle.

``request_scheduling()`` is safe to call anywhere, typically from
``transaction.on_commit`` after a write the scheduler should react to. It
enqueues the Celery task ``scheduler.run_cycle`` when ``SCHEDULER_AUTORUN`` is
true and does nothing otherwise. A broker that cannot be reached is logged,
not raised: the periodic tick of the scheduling loop picks the change up.
"""

from __future__ import annotations

import logging

from django.conf import settings

RUN_CYCLE_TASK = "scheduler.run_cycle"

logger = logging.getLogger(__name__)


def request_scheduling() -> bool:
    """Enqueue one scheduling cycle; True if a message was sent."""
    if not settings.SCHEDULER_AUTORUN:
        return False
    from portal.celery import app

    try:
        app.send_task(
            RUN_CYCLE_TASK,
            retry=True,
            retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5},
        )
    except Exception:  # the broker is down or misconfigured; submission must still succeed
        logger.warning("could not enqueue %s; the periodic tick will run it", RUN_CYCLE_TASK, exc_info=True)
        return False
    return True

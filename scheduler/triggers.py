"""Asking for a scheduling cycle.

``request_scheduling()`` is safe to call anywhere, typically from
``transaction.on_commit`` after a write the scheduler should react to. It
enqueues the Celery task ``scheduler.run_cycle`` when ``SCHEDULER_AUTORUN`` is
true and does nothing otherwise. A broker that cannot be reached is logged,
not raised: the periodic tick of the scheduling loop picks the change up.

Requests are debounced across every process through two Redis keys, so a
burst of submissions sends a handful of messages instead of one each:

* the first request of a window of ``DEBOUNCE_S`` seconds (``LEADING_KEY``
  absent) sends a message at once, so a lone submission is scheduled without
  delay;
* the first request after it in that window (``TRAILING_KEY`` absent) sends one
  message delayed by ``DEBOUNCE_S`` (a Celery countdown), which runs after every
  request of the window has committed;
* further requests while both keys live send nothing: the delayed message
  covers them.

Guarantee: every request is followed by a cycle that starts after it, from a
message sent by it or by an earlier request whose delayed message is still to
run. At most two messages per window leave, whatever the rate of requests.
When Redis cannot answer the debounce the message is sent anyway.

``request_forecasts()`` asks the same way for the start-time forecasts
(``scheduler.forecasts``), with its own keys and a window of
``FORECAST_INTERVAL_S``: a forecast runs the policy over the whole queue, so
it is recomputed at most twice per window however often the cluster changes.
"""

from __future__ import annotations

import logging

from django.conf import settings

from scheduler import coordination

RUN_CYCLE_TASK = "scheduler.run_cycle"
LEADING_KEY = "gpusched:scheduler:request-sent"
TRAILING_KEY = "gpusched:scheduler:request-delayed"
#: Length of a debounce window, in seconds: the longest a debounced request waits for its cycle's message.
DEBOUNCE_S = 0.2

FORECAST_TASK = "scheduler.recompute_forecasts"
FORECAST_LEADING_KEY = "gpusched:forecasts:request-sent"
FORECAST_TRAILING_KEY = "gpusched:forecasts:request-delayed"
#: Debounce window of the forecasts, in seconds.
FORECAST_INTERVAL_S = 3.0

logger = logging.getLogger(__name__)


def request_scheduling() -> bool:
    """Make sure a scheduling cycle runs after this call; True if a message was sent by it."""
    if not settings.SCHEDULER_AUTORUN:
        return False
    countdown = _debounce()
    if countdown is None:
        return False
    return _send(countdown)


def request_forecasts() -> bool:
    """Make sure the forecasts are recomputed after this call; True if a message was sent by it."""
    if not settings.SCHEDULER_AUTORUN:
        return False
    countdown = _debounce(FORECAST_LEADING_KEY, FORECAST_TRAILING_KEY, FORECAST_INTERVAL_S)
    if countdown is None:
        return False
    return _send(countdown, FORECAST_TASK)


def _debounce(leading: str = LEADING_KEY, trailing: str = TRAILING_KEY, window: float | None = None) -> float | None:
    """Seconds to delay this request's message (0: send now), or None: a pending message covers it.
    ``window`` None: ``DEBOUNCE_S``, read at the call."""
    window = DEBOUNCE_S if window is None else window
    window_ms = max(1, int(window * 1000))
    try:
        client = coordination.redis_client()
        if client.set(leading, "1", nx=True, px=window_ms):
            return 0.0
        if client.set(trailing, "1", nx=True, px=window_ms):
            return window
    except Exception:  # Redis trouble: sending one message too many is harmless, one too few is not
        logger.warning("scheduling request debounce unavailable; sending the message", exc_info=True)
        return 0.0
    return None


def _send(countdown: float, task: str = RUN_CYCLE_TASK) -> bool:
    from cluster.broker import app

    try:
        app.send_task(
            task,
            countdown=countdown or None,
            retry=True,
            retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5},
        )
    except Exception:  # the broker is down or misconfigured; submission must still succeed
        logger.warning("could not enqueue %s; the periodic tick will run it", task, exc_info=True)
        return False
    return True

"""The duration of scheduling cycles, recorded by the loop for ``/metrics``.

The one measurement ``/metrics`` shows that the database does not hold: the
loop (a Celery worker, another process than the web server) adds each cycle's
wall time to a histogram in a Redis hash, and the scrape
(``portal.metrics``) reads it back with :func:`read_cycle_histogram`.
"""

from __future__ import annotations

import logging
import math

from django.conf import settings

logger = logging.getLogger(__name__)

PREFIX = "gpusched"

#: Upper bounds (seconds) of the cycle-duration histogram.
CYCLE_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

CYCLE_KEY = f"{PREFIX}:metrics:scheduling_cycle_seconds"

_redis_client = None


def _redis():  # noqa: ANN202 - a redis.Redis, imported lazily
    """A process-wide Redis client with short timeouts (metrics must never stall a caller)."""
    global _redis_client
    if _redis_client is None:
        import redis

        _redis_client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
    return _redis_client


def le_label(bound: float) -> str:
    """A histogram bucket's ``le`` label as Prometheus writes it (``"0.5"``, ``"+Inf"``)."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def record_cycle_duration(seconds: float) -> bool:
    """Add one scheduling cycle of ``seconds`` wall time to the histogram.

    Returns True when stored. Never raises: a bad value or an unreachable Redis
    is logged and the sample dropped.
    """
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        logger.warning("cycle duration %r is not a number; not recorded", seconds)
        return False
    if not math.isfinite(value) or value < 0:
        logger.warning("cycle duration %r is not a finite non-negative number; not recorded", seconds)
        return False
    try:
        pipe = _redis().pipeline(transaction=True)
        for bound in (*CYCLE_BUCKETS, math.inf):
            if value <= bound:
                pipe.hincrby(CYCLE_KEY, le_label(bound), 1)
        pipe.hincrbyfloat(CYCLE_KEY, "sum", value)
        pipe.hincrby(CYCLE_KEY, "count", 1)
        pipe.execute()
    except Exception as exc:  # redis.RedisError and socket errors alike
        logger.warning("cycle duration not recorded (%s: %s)", type(exc).__name__, exc)
        return False
    return True


def read_cycle_histogram() -> tuple[list[tuple[str, float]], float] | None:
    """(cumulative buckets, sum) from Redis, or None when Redis cannot be read."""
    try:
        raw = _redis().hgetall(CYCLE_KEY)
    except Exception as exc:
        logger.warning("cycle histogram not readable (%s: %s)", type(exc).__name__, exc)
        return None
    values = {k.decode(): float(v) for k, v in raw.items()}
    buckets = [(le_label(b), values.get(le_label(b), 0.0)) for b in (*CYCLE_BUCKETS, math.inf)]
    return buckets, values.get("sum", 0.0)

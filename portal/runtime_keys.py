"""The Redis keys a running stack leaves that mean nothing once it has stopped.

While it runs the stack keeps short-lived coordination state in Redis: the
scheduling loop's request flag, lock, last tick and node-loss grace window,
the debounce marks of scheduling requests, the cycle-duration histogram of
``/metrics`` and the Channels layer's groups and messages (nobody listens
once the web server is gone). ``scripts/up.sh`` removes them when it stops.

Kept on purpose: the Celery/kombu queues (``celery``, ``node.<name>``,
``unacked``...), which hold the agents' reports and the commands not yet
delivered, so nothing is lost across a restart, and for the same reason the
telemetry stream (``gpusched:telemetry-stream``, capped, its consumer group
remembering what was stored); the telemetry rings (``gpusched:telemetry:*``,
history that expires on its own); the delivery marks of
reports (``gpusched:report:*``, they expire after a day and stop a report
redelivered after the restart from being stored twice); and the login
throttle's counters (``gpusched:login-failures:*``, they expire on their own
and a restart must not lift a lockout).
"""

from __future__ import annotations

import redis

#: Patterns (Redis MATCH syntax) of the stack's own state that stops meaning anything when it stops.
RUNTIME_PATTERNS = ("gpusched:scheduler:*", "gpusched:metrics:*")


def patterns(channel_prefix: str = "asgi") -> tuple[str, ...]:
    """Every pattern cleared, the Channels layer's (``<prefix>:*``) included."""
    return (*RUNTIME_PATTERNS, f"{channel_prefix}:*")


def clear(client: redis.Redis, match: tuple[str, ...]) -> int:
    """Delete the keys matching any of ``match``; returns how many were deleted.

    SCAN, not KEYS, so a large database is not blocked while it is searched.
    """
    deleted = 0
    for pattern in match:
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=500):
            batch.append(key)
            if len(batch) >= 500:
                deleted += client.delete(*batch)
                batch = []
        if batch:
            deleted += client.delete(*batch)
    return deleted

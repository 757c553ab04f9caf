"""Which running attempts are idle, and since when: the measured input of idle reclaim.

Telemetry ingestion (``gputelemetry.services``) calls ``track`` with each
attempt's mean GPU utilisation; an attempt below the site's threshold
(``GpuPolicy.idle_util_threshold``) is idle from its first idle report on
(``HSETNX``), a busy report forgets its idle spell and its warning (``HDEL``).
Two Redis hashes hold it, keyed ``<job id>:<attempt>``: ``IDLE_KEY`` ->
``<node> <since>``, ``WARNED_KEY`` -> the time of the warning. They are
runtime state of the loop (``gpusched:scheduler:*``, cleared when the stack
stops; a restart measures idleness afresh).

The snapshot reads them into ``RunningJob.idle_since`` / ``idle_warned_at``
(``read``), trusting an idle mark only from a node the attempt runs on; the
tick asks for a cycle when a warning or a reclaim may be due (``due``), since
nothing else would start one for a job that just sits there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis

log = logging.getLogger(__name__)

IDLE_KEY = "gpusched:scheduler:gpu-idle"
WARNED_KEY = "gpusched:scheduler:gpu-idle-warned"


def field(job_id: int | str, attempt: int) -> str:
    return f"{job_id}:{attempt}"


def track(pipe: redis.client.Pipeline, node: str, t: float, utilisation: Iterable[tuple[int, int, float]],
          threshold: float) -> None:
    """Queue the idle marks of one report: ``utilisation`` is (job id, attempt, mean GPU utilisation %)."""
    for job_id, attempt, util in utilisation:
        key = field(job_id, attempt)
        if util < threshold:
            pipe.hsetnx(IDLE_KEY, key, f"{node} {t:.3f}")
        else:
            pipe.hdel(IDLE_KEY, key)
            pipe.hdel(WARNED_KEY, key)


def read(client: redis.Redis, current: dict[tuple[int, int], set[str]]) -> tuple[dict, dict]:
    """(idle since, warned at) per (job id, attempt) of ``current`` (attempt -> its nodes); marks of
    other attempts are deleted. A Redis failure reads as nobody idle (nothing is reclaimed)."""
    try:
        idle_raw, warned_raw = client.hgetall(IDLE_KEY), client.hgetall(WARNED_KEY)
    except redis.RedisError as exc:
        log.warning("idle marks not read (%s): no idle reclaim this cycle", exc)
        return {}, {}
    idle, warned, stale = {}, {}, []
    for raw, value in idle_raw.items():
        key = _key(raw)
        node, _, since = value.decode(errors="replace").partition(" ")
        if key in current and node in current[key] and _float(since) is not None:
            idle[key] = _float(since)
        elif key not in current:
            stale.append(raw)
    for raw, value in warned_raw.items():
        key = _key(raw)
        if key in idle and _float(value) is not None:
            warned[key] = _float(value)
        elif key not in current:
            stale.append(raw)
    if stale:
        try:
            client.hdel(IDLE_KEY, *stale)
            client.hdel(WARNED_KEY, *stale)
        except redis.RedisError:
            pass  # deleted next cycle
    return idle, warned


def _key(raw: bytes) -> tuple[int, int] | None:
    job, _, attempt = raw.decode(errors="replace").partition(":")
    return (int(job), int(attempt)) if job.isdigit() and attempt.isdigit() else None


def _float(text: bytes | str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def forget(client: redis.Redis, job_id: int, attempt: int) -> None:
    """End the attempt's idle spell and its warning, as a busy report does: someone uses the job (an
    interactive session's owner working through the portal while its GPUs rest). Never raises: a Redis
    failure leaves the marks, and the next busy report or activity clears them."""
    key = field(job_id, attempt)
    try:
        client.hdel(IDLE_KEY, key)
        client.hdel(WARNED_KEY, key)
    except redis.RedisError as exc:
        log.warning("idle marks of %s not cleared (%s)", key, exc)


def mark_warned(client: redis.Redis, job_id: int, attempt: int, at: float) -> None:
    client.hset(WARNED_KEY, field(job_id, attempt), f"{at:.3f}")


def due(client: redis.Redis, now: float, after: float, grace: float) -> bool:
    """Whether some idle mark is old enough that a cycle may warn or reclaim (cheap: two HGETALLs)."""
    if after <= 0:
        return False
    try:
        idle, warned = client.hgetall(IDLE_KEY), client.hgetall(WARNED_KEY)
    except redis.RedisError:
        return False
    for raw, value in idle.items():
        since = _float(value.decode(errors="replace").partition(" ")[2])
        at = _float(warned[raw]) if raw in warned else None
        if since is not None and now - since >= after and (at is None or now - at >= grace):
            return True
    return False

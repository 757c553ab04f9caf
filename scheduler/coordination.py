"""The Redis client the loop's processes coordinate through.

One client per process and URL: the cycle lock and request key
(``scheduler.loop``), the debounce of scheduling requests
(``scheduler.triggers``) and the tick's bookkeeping (``cluster.liveness``).
"""

from __future__ import annotations

import functools

import redis
from django.conf import settings


@functools.lru_cache(maxsize=4)
def _redis_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)


def redis_client() -> redis.Redis:
    """The process's client for ``settings.REDIS_URL``."""
    return _redis_for(settings.REDIS_URL)

"""A clean telemetry store (this test Redis's ``gpusched:telemetry:*`` keys) for every test here."""

from __future__ import annotations

import pytest

from tests.support.live_helpers import no_triggers, sent  # noqa: F401 - fixtures


@pytest.fixture(autouse=True)
def telemetry_redis(redis_url, settings):  # noqa: ANN001, ANN201
    import redis

    from gputelemetry import services, store

    settings.REDIS_URL = redis_url
    services._client = None
    conn = redis.Redis.from_url(redis_url)
    keys = list(conn.scan_iter(match=f"{store.PREFIX}:*"))
    if keys:
        conn.delete(*keys)
    yield conn
    keys = list(conn.scan_iter(match=f"{store.PREFIX}:*"))
    if keys:
        conn.delete(*keys)
    services._client = None

"""The runtime keys a stopped stack leaves in Redis are removed; queues and expiring marks stay."""

from __future__ import annotations

import pytest
import redis
from django.core.management import call_command

from portal import runtime_keys

pytestmark = pytest.mark.redis

GONE = ["gpusched:scheduler:cycle-requested", "gpusched:scheduler:last-tick", "gpusched:scheduler:no-node-loss-until",
        "gpusched:metrics:scheduling_cycle_seconds", "asgi:group:job-7"]
KEPT = ["gpusched:login-failures:user:abc", "gpusched:report:stored:id-1:0", "unacked_index", "other-app:key"]


@pytest.fixture
def client(redis_url, settings):  # noqa: ANN001
    settings.REDIS_URL = redis_url
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [redis_url]}}}
    connection = redis.Redis.from_url(redis_url)
    connection.delete(*GONE, *KEPT, "celery")
    yield connection
    connection.delete(*GONE, *KEPT, "celery")


def test_the_command_removes_runtime_keys_and_keeps_queues_and_expiring_marks(client) -> None:
    for key in GONE + KEPT:
        client.set(key, "1")
    client.rpush("celery", '{"a report": "not yet handled"}')
    call_command("clear_runtime_keys")
    assert [k for k in GONE if client.exists(k)] == []
    assert [k for k in KEPT if not client.exists(k)] == []
    assert client.llen("celery") == 1


def test_clear_deletes_in_batches_and_counts(client) -> None:
    keys = [f"gpusched:scheduler:test-{i}" for i in range(1203)]
    client.mset({k: 1 for k in keys})
    assert runtime_keys.clear(client, runtime_keys.RUNTIME_PATTERNS) == 1203
    assert not any(client.exists(k) for k in keys[:5] + keys[-5:])

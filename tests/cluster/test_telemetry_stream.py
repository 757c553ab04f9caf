"""The telemetry stream's contract: which brokers carry it, the entry format, and its cap."""

from __future__ import annotations

import json

import pytest
import redis

from cluster import telemetry_stream


@pytest.mark.parametrize(("broker", "expected"), [
    ("redis://:pw@10.0.0.1:6379/2", "redis://:pw@10.0.0.1:6379/2"),
    ("rediss://h:6380/0", "rediss://h:6380/0"),
    ("unix:///run/redis.sock?db=1", "unix:///run/redis.sock?db=1"),
    ("redis+socket:///run/redis.sock", "unix:///run/redis.sock"),
    ("memory://", None),
    ("amqp://guest@h//", None),
])
def test_only_a_redis_broker_carries_the_stream(broker: str, expected: str | None) -> None:
    assert telemetry_stream.redis_url(broker) == expected


def test_an_entry_is_the_reports_kwargs_as_one_json_field() -> None:
    kwargs = {"node": "n1", "token": "t", "sampled_at": 1.5, "gpus": [], "jobs": []}
    entry = telemetry_stream.encode(kwargs)
    assert list(entry) == [telemetry_stream.FIELD]
    assert json.loads(entry[telemetry_stream.FIELD]) == kwargs


@pytest.mark.redis
def test_the_stream_keeps_only_about_the_newest_entries(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = redis.Redis.from_url(redis_url)
    conn.delete(telemetry_stream.STREAM_KEY)
    monkeypatch.setattr(telemetry_stream, "MAX_ENTRIES", 200)
    try:
        for k in range(2000):
            telemetry_stream.publish(conn, {"node": "n1", "k": k})
        length = conn.xlen(telemetry_stream.STREAM_KEY)
        newest = json.loads(conn.xrevrange(telemetry_stream.STREAM_KEY, count=1)[0][1][b"report"])
    finally:
        conn.delete(telemetry_stream.STREAM_KEY)
    # Trimming is approximate (whole stream nodes of up to 100 entries): at least the cap, never far past it.
    assert 200 <= length <= 400
    assert newest["k"] == 1999

"""scheduler.cycle_metrics: cycle durations recorded into a Redis histogram and read back, never raising."""

from __future__ import annotations

import math

import pytest
import redis

from scheduler import cycle_metrics

pytestmark = pytest.mark.redis


@pytest.fixture
def store(settings, redis_url):  # noqa: ANN001, ANN201
    settings.REDIS_URL = redis_url
    cycle_metrics._redis_client = None
    client = redis.Redis.from_url(redis_url)
    client.delete(cycle_metrics.CYCLE_KEY)
    yield client
    client.delete(cycle_metrics.CYCLE_KEY)
    cycle_metrics._redis_client = None


def test_bucket_labels_are_written_as_prometheus_writes_them() -> None:
    assert cycle_metrics.le_label(0.5) == "0.5"
    assert cycle_metrics.le_label(10) == "10.0"
    assert cycle_metrics.le_label(math.inf) == "+Inf"


def test_recorded_durations_are_read_back_as_cumulative_buckets(store) -> None:  # noqa: ANN001
    assert cycle_metrics.record_cycle_duration(0.003)
    assert cycle_metrics.record_cycle_duration(0.2)
    assert not cycle_metrics.record_cycle_duration(float("nan"))
    assert not cycle_metrics.record_cycle_duration("fast")
    buckets, total = cycle_metrics.read_cycle_histogram()
    counts = dict(buckets)
    assert (counts["0.005"], counts["0.25"], counts["+Inf"]) == (1, 2, 2)
    assert total == pytest.approx(0.203)


def test_an_unreachable_redis_drops_the_sample_and_reads_nothing(settings, caplog) -> None:  # noqa: ANN001
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    cycle_metrics._redis_client = None
    try:
        assert cycle_metrics.record_cycle_duration(0.1) is False
        assert cycle_metrics.read_cycle_histogram() is None
        assert "not recorded" in caplog.text and "not readable" in caplog.text
    finally:
        cycle_metrics._redis_client = None

"""The Redis hash of forecasts: replaced whole, read by job, changes reported."""

from __future__ import annotations

import pytest
import redis

from scheduler import forecast_store

pytestmark = pytest.mark.redis


@pytest.fixture
def client(redis_url):  # noqa: ANN001, ANN201
    c = redis.Redis.from_url(redis_url)
    c.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)
    yield c
    c.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)


def test_nothing_stored_reads_as_none(client) -> None:  # noqa: ANN001
    assert forecast_store.read([1, 2]) == {}
    assert forecast_store.read_one(1) is None
    assert forecast_store.read([]) == {}


def test_write_replaces_everything_and_reports_what_changed(client) -> None:  # noqa: ANN001
    assert forecast_store.write({1: (100.0, 1), 2: (None, 2)}, 50.0) == {1, 2}
    got = forecast_store.read([1, 2, 3])
    assert got[1] == forecast_store.StoredForecast(100.0, 1, 50.0)
    assert got[2] == forecast_store.StoredForecast(None, 2, 50.0)
    assert 3 not in got
    # 1 unchanged, 2 gone, 3 new.
    assert forecast_store.write({1: (100.0, 1), 3: (200.0, 2)}, 60.0) == {2, 3}
    assert forecast_store.read_one(2) is None and forecast_store.read_one(1).computed_at == 60.0
    assert forecast_store.write({}, 70.0) == {1, 3}
    assert client.exists(forecast_store.HASH_KEY) == 0


def test_unreachable_redis_reads_as_no_forecast(client, settings) -> None:  # noqa: ANN001
    """A submission or a page that shows forecasts must not fail while Redis is down."""
    forecast_store.write({1: (100.0, 1)}, 50.0)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    assert forecast_store.read([1]) == {}
    assert forecast_store.read_one(1) is None


def test_queue_heads_are_replaced_with_the_forecasts_and_cut_to_their_length(client) -> None:  # noqa: ANN001
    assert forecast_store.read_heads() == {}
    long = list(range(1, forecast_store.HEAD_LENGTH + 50))
    forecast_store.write({1: (100.0, 1)}, 50.0, {"TE": [7, 3], "BE": long})
    assert forecast_store.read_heads() == {"TE": [7, 3], "BE": long[:forecast_store.HEAD_LENGTH]}
    forecast_store.write({1: (100.0, 1)}, 60.0, {"BE": [2]})
    assert forecast_store.read_heads() == {"BE": [2]}
    forecast_store.write({}, 70.0)
    assert forecast_store.read_heads() == {}


def test_unreachable_redis_reads_as_no_queue_head(client, settings) -> None:  # noqa: ANN001
    forecast_store.write({1: (100.0, 1)}, 50.0, {"BE": [1]})
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert forecast_store.read_heads() == {}

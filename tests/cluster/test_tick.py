"""After the server could not hear the agents (no completed tick for a node-lost delay), the tick waits
one more delay before declaring nodes lost; otherwise it declares silent nodes lost as before."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.models import Node, NodeState
from cluster import tick
from scheduler import coordination, loop
from tests.support.live_helpers import make_node  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


@pytest.fixture
def client(redis_url, settings, no_triggers):  # noqa: ANN001, ANN201
    settings.REDIS_URL = redis_url
    settings.AGENT_HEARTBEAT_SECONDS = 1.0
    settings.NODE_LOST_HEARTBEATS = 2
    redis = coordination.redis_client()
    keys = (tick.LAST_TICK_KEY, tick.DEAF_UNTIL_KEY, loop.LOCK_KEY, loop.REQUEST_KEY)
    redis.delete(*keys)
    yield redis
    redis.delete(*keys)


def _silent_node() -> None:
    node = make_node("silent", 1)
    Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now() - timedelta(seconds=30))


def test_after_a_gap_in_ticks_silent_nodes_get_one_more_delay(client, sent) -> None:
    _silent_node()
    client.set(tick.LAST_TICK_KEY, time.time() - 60)  # the server was away for a minute
    assert tick.tick()["lost_nodes"] == []
    assert tick.tick()["lost_nodes"] == []  # still within the delay after the gap
    assert Node.objects.get(name="silent").state == NodeState.UP
    client.set(tick.DEAF_UNTIL_KEY, time.time() - 0.1)  # the delay has passed; ticks kept running
    assert tick.tick()["lost_nodes"] == ["silent"]


def test_with_regular_ticks_a_silent_node_is_lost_at_once(client, sent) -> None:
    _silent_node()
    client.set(tick.LAST_TICK_KEY, time.time() - 0.5)
    assert tick.tick()["lost_nodes"] == ["silent"]


def test_the_first_tick_ever_waits_too_and_says_so_without_a_warning(client, sent, caplog) -> None:
    _silent_node()
    with caplog.at_level(logging.INFO, logger="cluster.tick"):
        assert tick.tick()["lost_nodes"] == []
    assert float(client.get(tick.DEAF_UNTIL_KEY)) > time.time()
    assert [(r.levelno, r.message) for r in caplog.records if r.name == "cluster.tick"] == [
        (logging.INFO, "first tick: node-loss detection waits 2 s for heartbeats")]


def test_a_gap_in_ticks_is_a_warning(client, sent, caplog) -> None:
    client.set(tick.LAST_TICK_KEY, time.time() - 60)
    with caplog.at_level(logging.INFO, logger="cluster.tick"):
        tick.tick()
    assert [r.levelno for r in caplog.records if r.name == "cluster.tick"] == [logging.WARNING]

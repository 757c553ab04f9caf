"""Idle marks in Redis: first idle report kept, a busy one forgets; stale and foreign marks are not trusted."""

from __future__ import annotations

import pytest
import redis as redis_lib

from scheduler import idleness

pytestmark = pytest.mark.redis


@pytest.fixture
def client(redis_url):  # noqa: ANN001, ANN201
    conn = redis_lib.Redis.from_url(redis_url)
    conn.delete(idleness.IDLE_KEY, idleness.WARNED_KEY)
    yield conn
    conn.delete(idleness.IDLE_KEY, idleness.WARNED_KEY)


def track(client, t: float, util: float, node: str = "n1") -> None:  # noqa: ANN001
    pipe = client.pipeline()
    idleness.track(pipe, node, t, [(7, 1, util)], threshold=5.0)
    pipe.execute()


def test_an_idle_spell_starts_at_its_first_report_and_a_busy_report_ends_it(client) -> None:  # noqa: ANN001
    track(client, 100.0, 1.0)
    track(client, 105.0, 0.0)
    assert idleness.read(client, {(7, 1): {"n1"}}) == ({(7, 1): 100.0}, {})
    idleness.mark_warned(client, 7, 1, 130.0)
    assert idleness.read(client, {(7, 1): {"n1"}}) == ({(7, 1): 100.0}, {(7, 1): 130.0})
    assert idleness.due(client, 131.0, after=20.0, grace=10.0) is False  # warned 1 s ago
    assert idleness.due(client, 140.0, after=20.0, grace=10.0) is True
    track(client, 150.0, 80.0)
    assert idleness.read(client, {(7, 1): {"n1"}}) == ({}, {})
    assert idleness.due(client, 1e9, after=20.0, grace=10.0) is False


def test_marks_from_another_node_are_ignored_and_those_of_ended_attempts_deleted(client) -> None:  # noqa: ANN001
    track(client, 100.0, 0.0, node="intruder")
    assert idleness.read(client, {(7, 1): {"n1"}}) == ({}, {})
    assert client.hlen(idleness.IDLE_KEY) == 1  # kept: the attempt still runs
    assert idleness.read(client, {(8, 1): {"n1"}}) == ({}, {})
    assert client.hlen(idleness.IDLE_KEY) == 0
    assert idleness.due(client, 1e9, after=0.0, grace=0.0) is False  # reclaim off

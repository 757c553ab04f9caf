"""The worker watchdog: when a consumer counts as stalled, and what the watching thread does then.

A real worker whose consumer stops is ended and restarted in
tests/adversarial/test_adv_faults.py's Redis restart; here the decision, driven by hand.
"""

from __future__ import annotations

import pytest

from cluster import worker_watchdog as wd


def test_the_lists_watched_are_every_priority_step_of_every_queue() -> None:
    assert wd.redis_list_keys(["celery"]) == ["celery", "celery\x06\x163", "celery\x06\x166", "celery\x06\x169"]


def test_a_message_that_waits_while_the_worker_holds_nothing_stalls_it_after_the_limit() -> None:
    clock = wd.StallClock(10)
    assert not clock.observe(0, busy=False, oldest=(b"m1", None))
    assert not clock.observe(9.9, busy=False, oldest=(b"m1", None))
    assert clock.observe(10, busy=False, oldest=(b"m1", None))


@pytest.mark.parametrize("later", [
    dict(busy=True, oldest=(b"m1", None)),  # a busy worker takes no more until it acknowledges
    dict(busy=False, oldest=(None, None)),  # nothing waits
    dict(busy=False, oldest=None),  # the broker is down: the consumer's own reconnection deals with it
    dict(busy=False, oldest=(b"m2", None)),  # m1 was taken: the consumer works
])
def test_anything_but_the_same_message_waiting_at_an_idle_worker_restarts_the_clock(later) -> None:  # noqa: ANN001
    clock = wd.StallClock(10)
    clock.observe(0, busy=False, oldest=(b"m1", None))
    assert not clock.observe(5, **later)
    assert not clock.observe(12, busy=False, oldest=later["oldest"] or (b"m1", None))


def test_a_queue_whose_oldest_message_never_moves_stalls_even_while_another_moves() -> None:
    clock = wd.StallClock(10)
    clock.observe(0, busy=False, oldest=(b"a1", b"b1"))
    assert not clock.observe(5, busy=False, oldest=(b"a2", b"b1"))
    assert clock.observe(10, busy=False, oldest=(b"a3", b"b1"))


def test_the_watchdog_calls_on_stall_once_and_stops_watching() -> None:
    now = [0.0]
    stalls = []
    dog = wd.Watchdog(3, oldest=lambda: (b"m", None), busy=lambda: False, on_stall=stalls.append,
                      clock=lambda: now[0])
    assert not dog.check()
    now[0] = 3.5
    assert dog.check()
    assert stalls == [3.5]


def test_the_broker_is_not_asked_while_the_worker_is_busy() -> None:
    asked = []
    dog = wd.Watchdog(3, oldest=lambda: asked.append(1), busy=lambda: True, on_stall=pytest.fail,
                      clock=lambda: 100.0)
    assert not dog.check()
    assert asked == []


@pytest.mark.redis
def test_the_oldest_message_is_the_one_kombu_pops_next(redis_url) -> None:  # noqa: ANN001
    import redis

    client = redis.Redis.from_url(redis_url)
    key = "gpusched-test-watchdog-queue"
    try:
        client.delete(key)
        assert wd.oldest_messages(client, [key, key + "-empty"]) == (None, None)
        client.lpush(key, b"first")
        client.lpush(key, b"second")
        assert wd.oldest_messages(client, [key]) == (b"first",)
        assert client.brpop([key], 1) == (key.encode(), b"first")  # what kombu's consumer does
    finally:
        client.delete(key)
        client.close()


def test_an_unreachable_broker_is_no_observation() -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    assert wd.oldest_messages(client, ["celery"]) is None


def test_the_worker_app_carries_the_watchdog_and_the_setting_can_turn_it_off(settings) -> None:
    from portal.celery import app

    assert wd.ConsumerWatchdog in app.steps["consumer"]
    assert settings.WORKER_STALL_SECONDS > 0
    settings.WORKER_STALL_SECONDS = 0
    assert wd.stall_seconds() == 0

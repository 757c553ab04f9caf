"""The Redis lock and the debounced requests of ``scheduler.loop.run_requested_cycles``."""

from __future__ import annotations

import pytest

from scheduler import coordination, loop

pytestmark = pytest.mark.redis


@pytest.fixture
def client(redis_url, settings, monkeypatch):  # noqa: ANN001, ANN201
    """The test Redis, with the loop's keys cleared, and cycles counted instead of run."""
    settings.REDIS_URL = redis_url
    client = coordination.redis_client()
    client.delete(loop.LOCK_KEY, loop.REQUEST_KEY)
    yield client
    client.delete(loop.LOCK_KEY, loop.REQUEST_KEY)


def count_cycles(monkeypatch, during=None) -> list[int]:  # noqa: ANN001
    calls: list[int] = []

    def fake_cycle() -> None:
        calls.append(len(calls) + 1)
        if during is not None:
            during(len(calls))

    monkeypatch.setattr(loop, "run_cycle", fake_cycle)
    return calls


def test_a_request_runs_one_cycle_and_releases_the_lock(client, monkeypatch) -> None:
    calls = count_cycles(monkeypatch)
    assert loop.run_requested_cycles() == 1
    assert calls == [1]
    assert not client.exists(loop.LOCK_KEY) and not client.exists(loop.REQUEST_KEY)


def test_while_the_lock_is_held_a_request_is_left_for_the_holder(client, monkeypatch) -> None:
    calls = count_cycles(monkeypatch)
    holder = client.lock(loop.LOCK_KEY, timeout=30)
    assert holder.acquire(blocking=False)
    assert loop.run_requested_cycles() == 0
    assert calls == [] and client.exists(loop.REQUEST_KEY)
    holder.release()
    assert loop.run_requested_cycles() == 1


def test_a_burst_of_requests_during_a_cycle_costs_one_more_cycle(client, monkeypatch) -> None:
    """Ten triggers arrive while the first cycle runs: they are served by exactly one more cycle."""
    inner_results: list[int] = []

    def burst(n: int) -> None:
        if n == 1:
            inner_results.extend(loop.run_requested_cycles() for _ in range(10))

    calls = count_cycles(monkeypatch, during=burst)
    assert loop.run_requested_cycles() == 2
    assert inner_results == [0] * 10
    assert calls == [1, 2]


def test_a_request_made_as_the_lock_is_released_is_not_stranded(client, monkeypatch) -> None:
    """A trigger lands between the holder's last check and its release: the holder runs again."""
    calls = count_cycles(monkeypatch)
    real_release = loop._release
    released = []

    def release_then_request(lock) -> None:  # noqa: ANN001
        real_release(lock)
        if not released:
            released.append(True)
            client.set(loop.REQUEST_KEY, "1")  # what a trigger does before it fails to get the lock

    monkeypatch.setattr(loop, "_release", release_then_request)
    assert loop.run_requested_cycles() == 2
    assert calls == [1, 2] and not client.exists(loop.REQUEST_KEY)


def test_a_steady_stream_hands_over_to_a_new_task(client, monkeypatch) -> None:
    handed = []
    monkeypatch.setattr(loop, "_hand_over", lambda: handed.append(True))
    calls = count_cycles(monkeypatch, during=lambda n: client.set(loop.REQUEST_KEY, "1"))
    assert loop.run_requested_cycles() == loop.MAX_CYCLES_PER_RUN
    assert len(calls) == loop.MAX_CYCLES_PER_RUN and handed == [True]
    assert not client.exists(loop.LOCK_KEY)


def test_a_failing_cycle_releases_the_lock(client, monkeypatch) -> None:
    def boom() -> None:
        raise RuntimeError("cycle failed")

    monkeypatch.setattr(loop, "run_cycle", boom)
    with pytest.raises(RuntimeError):
        loop.run_requested_cycles()
    assert not client.exists(loop.LOCK_KEY)

"""One read of the cluster's shared state per change for all the portal's processes (``portal.cluster_cache``)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import redis

from portal import cluster_cache, realtime
from portal.dashboard import selectors

pytestmark = pytest.mark.redis


@pytest.fixture
def shared(settings, redis_url):  # noqa: ANN001
    settings.CLUSTER_STATE_SHARED = True
    settings.REDIS_URL = redis_url
    client = redis.Redis.from_url(redis_url)
    client.delete(cluster_cache.SEQ_KEY, cluster_cache.STATE_KEY, cluster_cache.LOCK_KEY)
    yield client
    client.delete(cluster_cache.SEQ_KEY, cluster_cache.STATE_KEY, cluster_cache.LOCK_KEY)
    client.close()


class Reader:
    """A process's read of the database: counts its reads, answers ``state`` (after ``delay`` s)."""

    def __init__(self, state: dict, delay: float = 0.0) -> None:
        self.state, self.delay, self.reads = state, delay, 0

    async def __call__(self) -> dict:
        self.reads += 1
        await asyncio.sleep(self.delay)
        return dict(self.state)


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(coro)


def test_a_second_process_takes_the_state_the_first_read_until_the_cluster_changes(shared) -> None:  # noqa: ANN001
    first, second = Reader({"v": 1}), Reader({"v": 2})
    assert run(cluster_cache.shared_state(first)) == {"v": 1}
    assert run(cluster_cache.shared_state(second)) == {"v": 1} and second.reads == 0
    cluster_cache.announce_change()  # a change committed: what was stored before it is not served
    assert run(cluster_cache.shared_state(second)) == {"v": 2} and second.reads == 1
    assert run(cluster_cache.shared_state(first)) == {"v": 2} and first.reads == 1


def test_pages_of_another_process_wait_for_the_read_under_way_instead_of_reading(shared) -> None:  # noqa: ANN001
    slow, other = Reader({"v": "slow"}, delay=0.3), Reader({"v": "other"})

    async def both() -> tuple[dict, dict]:
        reading = asyncio.ensure_future(cluster_cache.shared_state(slow))
        await asyncio.sleep(0.05)  # the slow read holds the lock
        return await reading, await cluster_cache.shared_state(other)

    assert run(both()) == ({"v": "slow"}, {"v": "slow"})
    assert (slow.reads, other.reads) == (1, 0)


def test_a_stale_or_older_state_is_not_served_and_never_replaces_a_newer(shared, monkeypatch) -> None:  # noqa: ANN001
    run(cluster_cache.shared_state(Reader({"v": "old"})))
    monkeypatch.setattr(cluster_cache, "MAX_AGE_S", 0.0)  # its time-based figures have moved on
    fresh = Reader({"v": "fresh"})
    assert run(cluster_cache.shared_state(fresh)) == {"v": "fresh"} and fresh.reads == 1
    monkeypatch.setattr(cluster_cache, "MAX_AGE_S", 10.0)
    cluster_cache.announce_change()
    run(cluster_cache.shared_state(Reader({"v": "newer"})))  # stored with seq 1
    shared.hset(cluster_cache.STATE_KEY, "seq", 5)  # as if a reader that began after 5 changes stored it
    stale_writer = Reader({"v": "late"})

    async def store_late() -> None:  # a reader that began before the 5 changes ends after that state was stored
        await cluster_cache._read_and_store(cluster_cache._client(), stale_writer)

    run(store_late())
    assert json.loads(shared.hget(cluster_cache.STATE_KEY, "state")) == {"v": "newer"}


def test_without_redis_each_process_reads_for_itself(shared, settings, caplog) -> None:  # noqa: ANN001
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    reader = Reader({"v": 1})
    with caplog.at_level(logging.WARNING, logger="portal.cluster_cache"):
        assert run(cluster_cache.shared_state(reader)) == {"v": 1}
    assert reader.reads == 1 and "reading the cluster in this process" in caplog.text


def test_turned_off_it_reads_every_time_and_still_counts_changes(shared, settings) -> None:  # noqa: ANN001
    """A process that shares no state still wakes the pages of those that do: its changes are counted."""
    settings.CLUSTER_STATE_SHARED = False
    reader = Reader({"v": 1})
    run(cluster_cache.shared_state(reader))
    run(cluster_cache.shared_state(reader))
    cluster_cache.announce_change()
    assert reader.reads == 2 and not shared.exists(cluster_cache.STATE_KEY)
    assert int(shared.get(cluster_cache.SEQ_KEY)) == 1


@pytest.mark.django_db
def test_a_cluster_hint_is_counted_before_it_is_sent(shared, monkeypatch) -> None:  # noqa: ANN001
    counted_when_sent: list[int] = []

    async def record(layer, items) -> None:  # noqa: ANN001
        counted_when_sent.append(int(shared.get(cluster_cache.SEQ_KEY) or 0))

    monkeypatch.setattr(realtime, "_group_send_all", record)
    realtime.publish_cluster_changed()
    realtime.flush()
    assert counted_when_sent == [1]


@pytest.mark.django_db
def test_the_shared_state_survives_its_trip_through_redis_unchanged(roles, make_job) -> None:  # noqa: ANN001
    """What another process is served is what the reader read: no tuple, key or number changes type."""
    from tests.support.live_helpers import make_node
    from tests.support.placed_jobs import placed_job

    make_node("n1", 4)
    placed_job(roles.owner, {"n1": [0, 1]})
    make_job(roles.other, name="waiting")
    state = selectors.shared_cluster_state()
    assert state["nodes"] and json.loads(json.dumps(state)) == state


@pytest.mark.django_db(transaction=True)
def test_a_cluster_page_is_sent_what_another_process_read_and_after_a_change_what_is_there(
        shared, ws_connect, roles) -> None:  # noqa: ANN001
    """The page's first state comes from the state another process stored (a node only it shows); the hint
    of a change counts it, so the next push is read afresh and no longer shows that node."""
    from asgiref.sync import async_to_sync, sync_to_async

    from portal import consumers
    from tests.support.live_helpers import make_node

    make_node("real-node", 1)
    stored = selectors.shared_cluster_state()
    stored["nodes"] = [{**stored["nodes"][0], "name": "read-by-another-process"}]
    async_to_sync(cluster_cache.shared_state)(Reader(stored))  # stored with the current count
    consumers.CLUSTER_READ._value = None  # this process has read nothing yet

    async def scenario() -> None:
        communicator, _ = await ws_connect("/ws/cluster/", roles.owner)
        first = await communicator.receive_json_from(5)
        assert [n["name"] for n in first["state"]["nodes"]] == ["read-by-another-process"]
        await sync_to_async(realtime.publish_cluster_changed)()
        pushed = await communicator.receive_json_from(5)
        assert [n["name"] for n in pushed["state"]["nodes"]] == ["real-node"]
        await communicator.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db
def test_the_cluster_page_is_drawn_from_the_current_stored_state_as_its_viewer_may_see_it(
        shared, roles) -> None:  # noqa: ANN001
    """``GET /cluster/`` takes the state the live pages were last sent while it is current, cut for its
    viewer (a link to one's own job only); once a change is counted it reads the database again."""
    from asgiref.sync import async_to_sync
    from django.test import Client

    from tests.support.live_helpers import make_node
    from tests.support.placed_jobs import placed_job

    make_node("real-node", 2)
    job = placed_job(roles.other, {"real-node": [0]})
    stored = selectors.shared_cluster_state()
    stored["nodes"] = [{**stored["nodes"][0], "name": "read-by-another-process"}]
    async_to_sync(cluster_cache.shared_state)(Reader(stored))

    def page(user) -> str:  # noqa: ANN001
        browser = Client()
        browser.force_login(user)
        return browser.get("/cluster/").content.decode()

    mine, theirs = page(roles.other), page(roles.owner)
    assert "read-by-another-process" in mine and "read-by-another-process" in theirs
    assert f"/jobs/{job.pk}/" in mine and f"/jobs/{job.pk}/" not in theirs
    cluster_cache.announce_change()
    assert "read-by-another-process" not in page(roles.owner) and "real-node" in page(roles.owner)

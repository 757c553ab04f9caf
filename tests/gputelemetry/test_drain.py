"""Draining the telemetry stream: reports stored a batch at a time, hostile entries dropped, the
entries of a dead consumer taken over, a poisonous one dropped, a lost stream recreated."""

from __future__ import annotations

import json
import time

import pytest
import redis

from cluster import protocol, telemetry_stream
from cluster.telemetry_stream import GROUP, STREAM_KEY
from gputelemetry import drain, store, tasks

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

GPU = {"i": 0, "uuid": "GPU-0", "util": 12.5, "fb_used": 10, "fb_total": 100, "temp": 40, "power": 90}


def report(node: str = "n1", **fields: object) -> dict:
    return {"node": node, "token": "", "sampled_at": 1.7e9, "gpus": [GPU], "jobs": [],
            "protocol_version": protocol.PROTOCOL_VERSION, **fields}


@pytest.fixture
def stream(telemetry_redis):  # noqa: ANN001, ANN201
    telemetry_redis.delete(STREAM_KEY)
    drain._group_ready.clear()
    yield telemetry_redis
    telemetry_redis.delete(STREAM_KEY)
    drain._group_ready.clear()


def stored_nodes(conn: redis.Redis) -> set[str]:
    return {k.decode().rsplit(":", 1)[1] for k in conn.scan_iter(match=store.latest_key("*"))}


def pending(conn: redis.Redis) -> int:
    return conn.xpending(STREAM_KEY, GROUP)["pending"]


def test_reports_are_stored_in_batches_and_acknowledged(stream) -> None:  # noqa: ANN001
    for k in range(5):
        telemetry_stream.publish(stream, report(f"n{k}"))
    done = drain.drain(stream, "c1", batch=2)
    assert (done.read, done.stored, done.dropped) == (5, 5, 0)
    assert stored_nodes(stream) == {f"n{k}" for k in range(5)}
    assert pending(stream) == 0
    assert drain.drain(stream, "c1").read == 0


def test_reports_sent_before_the_first_drain_are_read(stream) -> None:  # noqa: ANN001
    telemetry_stream.publish(stream, report("early"))
    assert drain.drain(stream, "c1").stored == 1
    assert stored_nodes(stream) == {"early"}


def test_a_drain_stops_at_its_budget_and_the_rest_waits_for_the_next(stream) -> None:  # noqa: ANN001
    for k in range(6):
        telemetry_stream.publish(stream, report(f"n{k}"))
    ticks = iter([0.0, 10.0, 20.0, 30.0])
    assert drain.drain(stream, "c1", batch=2, budget_s=1.0, clock=lambda: next(ticks)).read == 2
    assert drain.drain(stream, "c1", batch=10).read == 4
    assert len(stored_nodes(stream)) == 6


@pytest.mark.parametrize("entry", [
    {"report": json.dumps(report(token="wrong"))},
    {"report": "{not json"},
    {"report": "[1, 2]"},
    {"report": json.dumps(report(node="../../etc"))},
    {"report": json.dumps(report(protocol_version=99))},
    {"report": json.dumps(report(gpus=[{**GPU, "util": -5}]))},
    {"report": json.dumps(report(sampled_at="now"))},
    {"report": "x" * (telemetry_stream.MAX_ENTRY_BYTES + 1)},
    {"other": "field"},
])
def test_hostile_entries_are_dropped_and_the_good_ones_beside_them_stored(stream, settings, entry,  # noqa: ANN001
                                                                          caplog) -> None:  # noqa: ANN001
    settings.AGENT_TOKEN = ""
    if "wrong" in entry.get("report", ""):
        settings.AGENT_TOKEN = "s3cret"
    good = report("good", token=settings.AGENT_TOKEN)
    telemetry_stream.publish(stream, good)
    stream.xadd(STREAM_KEY, entry)
    telemetry_stream.publish(stream, report("good2", token=settings.AGENT_TOKEN))
    done = drain.drain(stream, "c1")
    assert (done.read, done.stored, done.dropped) == (3, 2, 1)
    assert stored_nodes(stream) == {"good", "good2"}
    assert pending(stream) == 0
    assert "dropped" in caplog.text


def test_the_entries_of_a_consumer_that_died_are_taken_over(stream, monkeypatch) -> None:  # noqa: ANN001
    drain.ensure_group(stream)
    telemetry_stream.publish(stream, report("orphaned"))
    stream.xreadgroup(GROUP, "dead-worker", {STREAM_KEY: ">"}, count=10)  # read, then never acknowledged
    assert drain.drain(stream, "c1").stored == 0  # not yet: the dead consumer may only be slow
    monkeypatch.setattr(drain, "RECLAIM_IDLE_MS", 0)
    done = drain.drain(stream, "c1")
    assert (done.reclaimed, done.stored) == (1, 1)
    assert stored_nodes(stream) == {"orphaned"}
    assert pending(stream) == 0


def test_an_entry_whose_handling_kills_its_worker_every_time_is_dropped(stream, monkeypatch,  # noqa: ANN001
                                                                         caplog) -> None:  # noqa: ANN001
    drain.ensure_group(stream)
    telemetry_stream.publish(stream, report("poison"))
    stream.xreadgroup(GROUP, "w1", {STREAM_KEY: ">"}, count=10)
    entry_id = stream.xpending_range(STREAM_KEY, GROUP, "-", "+", 10)[0]["message_id"]
    for k in range(drain.MAX_DELIVERIES - 1):  # taken over and lost again by further dying workers
        stream.xclaim(STREAM_KEY, GROUP, f"w{k + 2}", 0, [entry_id])
    monkeypatch.setattr(drain, "RECLAIM_IDLE_MS", 0)
    done = drain.drain(stream, "c1")
    assert (done.dropped, done.stored) == (1, 0)
    assert pending(stream) == 0
    assert "unacknowledged" in caplog.text


def test_a_failure_while_storing_leaves_the_batch_pending(stream, monkeypatch) -> None:  # noqa: ANN001
    telemetry_stream.publish(stream, report("n1"))

    def broken(*_args: object) -> None:
        raise redis.ConnectionError("store unreachable")

    monkeypatch.setattr(drain.services, "ingest_many", broken)
    with pytest.raises(redis.ConnectionError):
        drain.drain(stream, "c1")
    assert pending(stream) == 1


def test_a_stream_deleted_under_the_drain_is_made_again(stream) -> None:  # noqa: ANN001
    assert drain.drain(stream, "c1").read == 0
    stream.delete(STREAM_KEY)  # Redis restarted empty
    assert drain.drain(stream, "c1").read == 0
    telemetry_stream.publish(stream, report("after"))
    assert drain.drain(stream, "c1").stored == 1


def test_the_beat_task_drains_the_brokers_redis(stream, settings, redis_url) -> None:  # noqa: ANN001
    from gputelemetry import services

    settings.CELERY_BROKER_URL = redis_url
    services._stream_client = None
    telemetry_stream.publish(stream, report("via-task"))
    try:
        assert tasks.drain.apply().get() == 1
        settings.CELERY_BROKER_URL = "memory://"
        services._stream_client = None
        assert tasks.drain.apply().get() == 0  # no Redis broker, no stream: agents send the Celery task
    finally:
        services._stream_client = None
    assert stored_nodes(stream) == {"via-task"}


def test_one_drain_at_a_time(stream) -> None:  # noqa: ANN001
    telemetry_stream.publish(stream, report("n1"))
    held = stream.lock(drain.LOCK_KEY, timeout=5)
    assert held.acquire(blocking=False)
    try:
        assert drain.drain_alone(stream, "c2") is None  # another drain is reading the stream
    finally:
        held.release()
    assert drain.drain_alone(stream, "c2").stored == 1
    assert not stream.exists(drain.LOCK_KEY)


def test_the_drain_runs_on_beats_schedule(settings) -> None:  # noqa: ANN001
    entry = settings.CELERY_BEAT_SCHEDULE["telemetry-drain"]
    assert entry["task"] == tasks.DRAIN_TASK
    assert entry["schedule"] == settings.GPUSCHED_TELEMETRY_DRAIN_SECONDS
    assert entry["options"]["queue"] == settings.TELEMETRY_QUEUE == "celery"


def test_consumers_long_gone_with_nothing_pending_are_forgotten(stream, monkeypatch) -> None:  # noqa: ANN001
    drain.ensure_group(stream)
    telemetry_stream.publish(stream, report("n1"))
    stream.xreadgroup(GROUP, "still-holding", {STREAM_KEY: ">"}, count=10)  # pending: kept for the take-over
    stream.xreadgroup(GROUP, "gone", {STREAM_KEY: ">"}, count=10)  # nothing left to read: nothing pending
    time.sleep(0.01)
    monkeypatch.setattr(drain, "FORGET_CONSUMER_MS", 5)
    drain.drain(stream, "c1")
    names = {c["name"] for c in stream.xinfo_consumers(STREAM_KEY, GROUP)}
    assert b"gone" not in names and b"still-holding" in names


def test_signed_reports_are_stored_and_one_signed_for_another_node_or_altered_is_dropped(stream, settings) -> None:  # noqa: ANN001
    from cluster import auth, message_signing

    settings.GPUSCHED_AGENT_DEV_MODE = False
    settings.AGENT_SECRET = "s3cret"

    def signed(node: str, key_of: str) -> dict:
        content = {k: v for k, v in report(node).items() if k != "token"}
        return message_signing.signed(auth.node_token("s3cret", key_of), protocol.REPORT_TELEMETRY, content, 1.0)

    telemetry_stream.publish(stream, signed("n1", "n1"))
    telemetry_stream.publish(stream, signed("n2", "n1"))  # n1's token signing for n2
    telemetry_stream.publish(stream, {**signed("n3", "n3"), "gpus": [{**GPU, "util": 99.0}]})  # altered on the way
    done = drain.drain(stream, "c1")
    assert (done.read, done.stored, done.dropped) == (3, 1, 2)
    assert stored_nodes(stream) == {"n1"}

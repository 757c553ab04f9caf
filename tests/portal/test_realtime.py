"""portal.realtime: hints go out on commit, are coalesced, never on rollback, never raise."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction

from portal import realtime

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _isolated(memory_layer):
    """Every test starts with the in-memory layer and nothing pending."""


def listen(layer, *groups: str) -> str:
    name = async_to_sync(layer.new_channel)()
    for group in groups:
        async_to_sync(layer.group_add)(group, name)
    return name


def drain(layer, channel: str) -> list[dict]:
    async def read() -> list[dict]:
        out = []
        while True:
            try:
                out.append(await asyncio.wait_for(layer.receive(channel), timeout=0.05))
            except asyncio.TimeoutError:
                return out

    return async_to_sync(read)()


def test_job_change_reaches_job_cluster_and_latency_groups_on_commit(memory_layer, django_capture_on_commit_callbacks):
    job_ch = listen(memory_layer, realtime.job_group(7))
    cluster_ch = listen(memory_layer, realtime.CLUSTER_GROUP)
    latency_ch = listen(memory_layer, realtime.LATENCY_GROUP)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        realtime.publish_job_changed(7)
    assert drain(memory_layer, job_ch) == []  # nothing before the commit
    for callback in callbacks:
        callback()
    assert drain(memory_layer, job_ch) == [{"type": "jobs.changed", "job_ids": [7]}]
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]
    assert drain(memory_layer, latency_ch) == [{"type": "latency.changed"}]


def test_many_jobs_changed_at_once_reach_their_groups_and_each_page_once(memory_layer,
                                                                      django_capture_on_commit_callbacks):
    job_ch = listen(memory_layer, realtime.job_group(11))
    other_ch = listen(memory_layer, realtime.job_group(12))
    cluster_ch = listen(memory_layer, realtime.CLUSTER_GROUP)
    latency_ch = listen(memory_layer, realtime.LATENCY_GROUP)
    with django_capture_on_commit_callbacks(execute=True):
        realtime.publish_jobs_changed([11, 12])
        realtime.publish_jobs_changed(iter([12]))
    assert [m["type"] for m in drain(memory_layer, job_ch)] == ["jobs.changed"]
    assert 12 in drain(memory_layer, other_ch)[0]["job_ids"]
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]
    assert drain(memory_layer, latency_ch) == [{"type": "latency.changed"}]


def test_hints_of_one_transaction_are_coalesced(memory_layer, django_capture_on_commit_callbacks):
    cluster_ch = listen(memory_layer, realtime.CLUSTER_GROUP)
    job_ch = listen(memory_layer, realtime.job_group(3))
    with django_capture_on_commit_callbacks(execute=True):
        for job_id in (1, 2, 3, 3):
            realtime.publish_job_changed(job_id)
        realtime.publish_cluster_changed()
        realtime.publish_log_lines(3, 1)
        realtime.publish_log_lines(3, 1)
        realtime.publish_log_lines(3, 2)
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]
    assert drain(memory_layer, job_ch) == [
        {"type": "jobs.changed", "job_ids": [3]},
        {"type": "job.log", "job_id": 3, "attempt": 1},
        {"type": "job.log", "job_id": 3, "attempt": 2},
    ]


def test_jobs_of_one_shard_share_one_hint_and_a_transaction_registers_one_flush(
        memory_layer, django_capture_on_commit_callbacks):
    shard = listen(memory_layer, realtime.job_group(3))
    other = listen(memory_layer, realtime.job_group(4))
    assert realtime.job_group(3) == realtime.job_group(3 + realtime.JOB_SHARDS) != realtime.job_group(4)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        for job_id in (3 + realtime.JOB_SHARDS, 3, *range(1000, 1300)):
            realtime.publish_job_changed(job_id)
    assert len(callbacks) == 1  # not one per hint
    callbacks[0]()
    assert drain(memory_layer, shard) == [
        {"type": "jobs.changed", "job_ids": [3, 3 + realtime.JOB_SHARDS]
         + [j for j in range(1000, 1300) if j % realtime.JOB_SHARDS == 3]}]
    assert drain(memory_layer, other) == [
        {"type": "jobs.changed", "job_ids": [j for j in range(1000, 1300) if j % realtime.JOB_SHARDS == 4]}]


@pytest.mark.django_db(transaction=True)
def test_rolled_back_change_is_not_announced(memory_layer):
    job_ch = listen(memory_layer, realtime.job_group(5))
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            realtime.publish_job_changed(5)
            raise RuntimeError("abort")
    assert drain(memory_layer, job_ch) == []


def test_no_channel_layer_is_a_no_op(settings, django_capture_on_commit_callbacks):
    settings.CHANNEL_LAYERS = {}
    with django_capture_on_commit_callbacks(execute=True):
        realtime.publish_job_changed(1)
    assert realtime._pending() == {} and realtime._changed_job_ids() == set()


def test_unreachable_layer_is_logged_not_raised_and_pauses_publishing(settings, caplog, django_capture_on_commit_callbacks):
    # Port 1 on localhost refuses connections at once.
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]}}
    }
    with django_capture_on_commit_callbacks(execute=True):
        realtime.publish_cluster_changed()
    assert "live update not sent" in caplog.text
    caplog.clear()
    with django_capture_on_commit_callbacks(execute=True):
        realtime.publish_cluster_changed()
    assert "live update not sent" not in caplog.text  # dropped during the cooldown, not retried
    assert realtime._pending() == {}


def test_saved_job_event_and_log_chunk_publish_through_signals(memory_layer, roles, make_job, django_capture_on_commit_callbacks):
    from scheduler.models import Attempt, AttemptLog, JobEvent, JobState

    job = make_job(roles.owner, state=JobState.RUNNING)
    attempt = Attempt.objects.get(job=job)
    job_ch = listen(memory_layer, realtime.job_group(job.pk))
    # The fixture's writes registered a flush in the test's never-committed transaction;
    # send it now so the block below registers (and captures) one of its own.
    realtime.flush()
    drain(memory_layer, job_ch)
    with django_capture_on_commit_callbacks(execute=True):
        JobEvent.objects.create(job=job, from_state=JobState.RUNNING, to_state=JobState.COMPLETED)
        AttemptLog.objects.create(attempt=attempt, text="step 1")
    assert drain(memory_layer, job_ch) == [
        {"type": "jobs.changed", "job_ids": [job.pk]},
        {"type": "job.log", "job_id": job.pk, "attempt": 1},
    ]


def test_saving_or_deleting_a_node_refreshes_the_cluster_but_a_heartbeat_update_does_not(memory_layer, django_capture_on_commit_callbacks):
    from django.utils import timezone

    from cluster.models import Node

    cluster_ch = listen(memory_layer, realtime.CLUSTER_GROUP)
    with django_capture_on_commit_callbacks(execute=True):
        node = Node.objects.create(name="fresh", gpus=2)
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]
    with django_capture_on_commit_callbacks(execute=True):
        Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now())
    assert drain(memory_layer, cluster_ch) == []
    with django_capture_on_commit_callbacks(execute=True):
        node.delete()  # an administrator's: the page must not show it until its next minute's refresh
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]


def test_publishing_from_a_thread_with_a_running_event_loop_still_sends(memory_layer):
    """Sync code called from inside a running loop (no sync_to_async) must not lose the hint."""
    import asyncio

    cluster_ch = listen(memory_layer, realtime.CLUSTER_GROUP)

    async def inside_a_loop() -> int:
        return realtime._send([(realtime.CLUSTER_GROUP, {"type": "cluster.changed"})])

    # The in-memory layer is bound to no loop, so the helper thread's loop can use it.
    assert asyncio.run(inside_a_loop()) == 1
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]


def test_submission_refreshes_cluster_and_latency_but_not_the_job_group(memory_layer, django_capture_on_commit_callbacks):
    job_ch = listen(memory_layer, realtime.job_group(9))
    cluster_ch = listen(memory_layer, realtime.CLUSTER_GROUP)
    latency_ch = listen(memory_layer, realtime.LATENCY_GROUP)
    with django_capture_on_commit_callbacks(execute=True):
        realtime.publish_job_submitted(9)
    assert drain(memory_layer, job_ch) == []
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]
    assert drain(memory_layer, latency_ch) == [{"type": "latency.changed"}]


def test_submission_hints_are_throttled_per_process(memory_layer, django_capture_on_commit_callbacks, monkeypatch):
    cluster_ch = listen(memory_layer, realtime.CLUSTER_GROUP)
    clock = [1000.0]
    monkeypatch.setattr(realtime, "_clock", lambda: clock[0])
    for _ in range(20):  # a burst of separate commits within one interval
        with django_capture_on_commit_callbacks(execute=True):
            realtime.publish_job_submitted(1)
        clock[0] += realtime.SUBMISSION_HINT_INTERVAL_S / 40
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]
    clock[0] += realtime.SUBMISSION_HINT_INTERVAL_S
    with django_capture_on_commit_callbacks(execute=True):
        realtime.publish_job_submitted(2)
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]  # the next interval sends again
    with django_capture_on_commit_callbacks(execute=True):
        realtime.publish_job_changed(2)  # transitions are never throttled
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]


def test_submission_event_publishes_through_the_signal_without_the_job_group(memory_layer, roles, make_job,
                                                                              django_capture_on_commit_callbacks):
    cluster_ch = listen(memory_layer, realtime.CLUSTER_GROUP)
    with django_capture_on_commit_callbacks(execute=True):
        job = make_job(roles.owner)
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]
    job_ch = listen(memory_layer, realtime.job_group(job.pk))
    realtime.reset_cooldown()
    from scheduler.models import JobEvent, JobState

    with django_capture_on_commit_callbacks(execute=True):
        JobEvent.objects.create(job=job, to_state=JobState.PENDING, reason="Submitted")
    assert drain(memory_layer, job_ch) == []


def test_new_forecasts_refresh_their_job_pages_and_the_cluster_queue(memory_layer, django_capture_on_commit_callbacks):
    job_ch = listen(memory_layer, realtime.job_group(5))
    cluster_ch = listen(memory_layer, realtime.CLUSTER_GROUP)
    latency_ch = listen(memory_layer, realtime.LATENCY_GROUP)
    with django_capture_on_commit_callbacks(execute=True):
        realtime.publish_forecasts_changed([5, 5 + realtime.JOB_SHARDS, 6])
    assert drain(memory_layer, job_ch) == [{"type": "jobs.changed", "job_ids": [5, 5 + realtime.JOB_SHARDS]}]
    assert drain(memory_layer, cluster_ch) == [{"type": "cluster.changed"}]
    assert drain(memory_layer, latency_ch) == []  # no job changed state


def test_sending_leaves_no_exception_holding_the_callers_frames(memory_layer):
    """A send from code without an event loop used to run inside the ``except`` of the loop check:
    the exception it re-raised kept every caller's frame (a scheduling cycle's whole snapshot) in a
    reference cycle until the garbage collector ran."""
    import gc
    import types

    class Held:
        pass

    def caller() -> int:
        held = Held()  # noqa: F841 (what the caller's frame keeps alive)
        realtime.publish_cluster_changed()
        return realtime.flush()

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        sent = caller()
        gc.collect()
        left = sorted({type(o).__name__ for o in gc.garbage
                       if isinstance(o, Held | types.FrameType | types.TracebackType | BaseException)})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert sent == 1
    assert left == []

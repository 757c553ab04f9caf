"""Reports acknowledged once handled: the task options, the redelivery limit and the log batch stored once.

The worker-kill behaviour itself is tested against real processes in
tests/adversarial/test_adv_faults.py; here the parts that decide it, on the Redis at REDIS_URL.
"""

from __future__ import annotations

import logging
import uuid
from types import SimpleNamespace

import pytest
import redis

from cluster import protocol, tasks
from scheduler.models import AttemptLog
from tests.support.placed_jobs import placed_job
from tests.support.live_helpers import make_node, make_user

pytestmark = pytest.mark.redis


@pytest.fixture
def marks(redis_url, settings):  # noqa: ANN001, ANN201
    """tasks' Redis client pointed at the test Redis; every key a test made is deleted afterwards."""
    settings.REDIS_URL = redis_url
    tasks._redis = None
    client = redis.Redis.from_url(redis_url)
    yield client
    for pattern in ("gpusched:report:*",):
        for key in client.scan_iter(pattern):
            client.delete(key)
    tasks._redis = None
    client.close()


def request(redelivered: bool, retries: int = 0, task_id: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(id=task_id or uuid.uuid4().hex, retries=retries,
                           delivery_info={"exchange": "", "routing_key": "celery", "redelivered": redelivered})


def test_every_report_task_is_acknowledged_only_once_handled_and_handed_back_when_its_process_dies() -> None:
    from portal.celery import app

    for name in (protocol.REPORT_REGISTER, protocol.REPORT_HEARTBEAT, protocol.REPORT_STARTED,
                 protocol.REPORT_EXITED, protocol.REPORT_LOG):
        task = app.tasks[name]
        assert (task.acks_late, task.reject_on_worker_lost) == (True, True), name


def test_the_broker_gives_unacknowledged_messages_back_within_the_configured_timeout(settings) -> None:
    from portal.celery import app

    options = app.conf.broker_transport_options
    assert options["visibility_timeout"] == settings.BROKER_VISIBILITY_TIMEOUT
    # looked for at least ten times per timeout, not once every 100 s (kombu's default)
    assert options["unacked_restore_interval"] * options["unacked_restore_throttle"] <= max(
        1, settings.BROKER_VISIBILITY_TIMEOUT / 10)


def test_a_first_delivery_is_never_counted_or_dropped(marks) -> None:
    req = request(redelivered=False)
    for _ in range(tasks.MAX_REDELIVERIES + 3):
        assert tasks.delivered_too_often(req) is None
    # Only this message's keys: live workers of other tests share the Redis database.
    assert list(marks.scan_iter(f"gpusched:report:*{req.id}*")) == []


def test_a_message_delivered_again_too_often_is_dropped(marks) -> None:
    req = request(redelivered=True)
    counts = [tasks.delivered_too_often(req) for _ in range(tasks.MAX_REDELIVERIES + 2)]
    assert counts == [None] * tasks.MAX_REDELIVERIES + [tasks.MAX_REDELIVERIES + 1, tasks.MAX_REDELIVERIES + 2]
    # a retry of the same task (a new message) starts its own count
    assert tasks.delivered_too_often(request(redelivered=True, retries=1, task_id=req.id)) is None
    assert 0 < marks.ttl(tasks.REDELIVERIES_KEY.format(id=req.id, retries=0)) <= tasks.MARK_TTL_S


def test_the_task_drops_a_report_delivered_again_too_often(marks, monkeypatch, caplog) -> None:
    handled = []
    monkeypatch.setattr(tasks.liveness, "heartbeat", lambda *a, **k: handled.append(a))
    req = request(redelivered=True)
    key = tasks.REDELIVERIES_KEY.format(id=req.id, retries=0)
    marks.set(key, tasks.MAX_REDELIVERIES)
    tasks.heartbeat.push_request(id=req.id, retries=0, delivery_info=req.delivery_info)
    try:
        with caplog.at_level(logging.ERROR, logger="cluster.tasks"):
            tasks.heartbeat.run(node="n1", running=[], token="")
    finally:
        tasks.heartbeat.pop_request()
    assert handled == []
    assert f"{protocol.REPORT_HEARTBEAT} from node 'n1' dropped: delivered again {tasks.MAX_REDELIVERIES + 1} times" \
        in caplog.text


def test_an_unreachable_redis_never_drops_a_redelivered_report(settings) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    tasks._redis = None
    try:
        assert tasks.delivered_too_often(request(redelivered=True)) is None
        assert tasks.already_stored(request(redelivered=True)) is False
    finally:
        tasks._redis = None


@pytest.mark.django_db
def test_a_log_batch_delivered_twice_is_stored_once(marks, sent, no_triggers) -> None:
    make_node("n1", 1)
    job = placed_job(make_user("alice"), {"n1": [0]})
    kwargs = {"node": "n1", "job_id": job.pk, "attempt": 1, "lines": ["epoch 1"], "token": ""}
    task_id = uuid.uuid4().hex
    tasks.log_lines.apply(kwargs=kwargs, task_id=task_id)
    tasks.log_lines.apply(kwargs=kwargs, task_id=task_id)  # the same message again
    tasks.log_lines.apply(kwargs=kwargs, task_id=uuid.uuid4().hex)  # another batch with the same text
    assert list(AttemptLog.objects.filter(attempt__job=job).values_list("text", flat=True)) == ["epoch 1"] * 2


@pytest.mark.django_db
def test_a_log_batch_refused_is_not_marked_stored(marks, sent, no_triggers, settings) -> None:
    make_node("n1", 1)
    job = placed_job(make_user("alice"), {"n1": [0]})
    settings.AGENT_TOKEN = "s3cret"
    kwargs = {"node": "n1", "job_id": job.pk, "attempt": 1, "lines": ["epoch 1"]}
    task_id = uuid.uuid4().hex
    tasks.log_lines.apply(kwargs={**kwargs, "token": "wrong"}, task_id=task_id)
    assert not marks.exists(tasks.STORED_KEY.format(id=task_id, retries=0))
    tasks.log_lines.apply(kwargs={**kwargs, "token": "s3cret"}, task_id=task_id)
    assert AttemptLog.objects.filter(attempt__job=job).count() == 1

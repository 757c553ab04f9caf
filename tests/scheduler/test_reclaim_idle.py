"""Idle reclaim through the scheduling loop: an idle TE job is warned (event, log line, notification kind),
then ended with IDLE_RECLAIMED after the grace; a busy one is not touched."""

from __future__ import annotations

import time

import pytest
import redis as redis_lib

from cluster import protocol
from cluster.models import GpuPolicy
from notifications.events import IDLE_WARNING, kind_of
from scheduler import idleness, loop
from scheduler.models import Attempt, JobEvent, JobState
from tests.support.live_helpers import log_lines, make_node, make_user, submit
from tests.support.placed_jobs import exit_report, placed_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


@pytest.fixture
def marks(redis_url, settings):  # noqa: ANN001, ANN201
    settings.REDIS_URL = redis_url
    conn = redis_lib.Redis.from_url(redis_url)
    conn.delete(idleness.IDLE_KEY, idleness.WARNED_KEY)
    yield conn
    conn.delete(idleness.IDLE_KEY, idleness.WARNED_KEY)


def test_an_idle_te_job_is_warned_then_reclaimed_and_a_busy_one_is_not(
        marks, sent, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    GpuPolicy.objects.create(pk=1, idle_after_s=60, idle_grace_s=30)
    make_node("n1", 3)
    alice = make_user("alice")
    idle = placed_job(alice, {"n1": [0]}, job_class="TE")
    busy = placed_job(alice, {"n1": [1]}, job_class="TE")
    submit(alice, "waiting", num_gpus=2)  # cannot start: one GPU is free
    marks.hset(idleness.IDLE_KEY, idleness.field(idle.pk, 1), f"n1 {time.time() - 100}")

    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    warning = JobEvent.objects.get(job=idle, reason="IdleWarning")
    assert (warning.from_state, warning.to_state) == (JobState.RUNNING, JobState.RUNNING)
    assert kind_of(warning.from_state, warning.to_state, warning.reason) == IDLE_WARNING
    assert "not resumed" in warning.message or "will not restart" in warning.message
    assert any("IDLE_RECLAIMED" in line for line in log_lines(Attempt.objects.get(job=idle)))
    assert marks.hget(idleness.WARNED_KEY, idleness.field(idle.pk, 1)) is not None

    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()  # within the grace: nothing more
    idle.refresh_from_db()
    assert idle.state == JobState.RUNNING and JobEvent.objects.filter(job=idle, reason="IdleWarning").count() == 1

    marks.hset(idleness.WARNED_KEY, idleness.field(idle.pk, 1), f"{time.time() - 31}")
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    idle.refresh_from_db()
    assert idle.state == JobState.CANCELLING
    assert [(n, kw["job_id"], kw["reason"]) for n, kw in sent.of(protocol.AGENT_KILL)] == [
        ("n1", idle.pk, protocol.EXIT_CANCEL)]
    exit_report(idle, reason=protocol.EXIT_CANCEL, exit_code=None, signal=15)
    idle.refresh_from_db()
    assert idle.state == JobState.CANCELLED
    assert JobEvent.objects.filter(job=idle).latest("id").reason == "IDLE_RECLAIMED"

    busy.refresh_from_db()
    assert busy.state == JobState.RUNNING and not JobEvent.objects.filter(job=busy, reason="IdleWarning").exists()

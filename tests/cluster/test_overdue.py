"""Commands whose effect is overdue are re-sent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster import overdue, protocol
from cluster.models import Gpu
from scheduler.models import Attempt, AttemptState, JobState
from tests.support.live_helpers import make_node
from tests.support.placed_jobs import owner, placed_job  # noqa: F401 - owner is a fixture

pytestmark = pytest.mark.django_db


def test_overdue_stops_and_launches_are_re_sent(owner, sent, settings) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    make_node("n1", 3)
    now = timezone.now()
    preempting = placed_job(owner, {"n1": [0]}, state=JobState.PREEMPTING, grace=5)
    Attempt.objects.filter(job=preempting).update(notice_at=now - timedelta(seconds=8))  # 5 + 2 < 8: overdue
    patient = placed_job(owner, {"n1": [1]}, state=JobState.CANCELLING, grace=5)
    Attempt.objects.filter(job=patient).update(notice_at=now - timedelta(seconds=6))  # not overdue yet
    starting = placed_job(owner, {"n1": [2]}, state=JobState.STARTING, started_ago=3)
    resent = overdue.resend_overdue_commands(now)
    assert sorted(resent) == sorted([(protocol.AGENT_PREEMPT, preempting.pk, 1), (protocol.AGENT_LAUNCH, starting.pk, 1)])
    assert ("n1", {"job_id": preempting.pk, "attempt": 1, "grace_period": 0.0}) in sent.of(protocol.AGENT_PREEMPT)
    ((_, launch),) = sent.launches
    assert launch["gpu_indices"] == [2] and launch["resume"] is False


def test_the_stop_of_ranks_outliving_a_failed_or_lost_rank_is_re_sent_without_grace(owner, sent, settings) -> None:
    """Another rank failed or its node was lost: the ranks still running were told to stop with the job's
    grace; once that and the node-lost delay have passed, they are told again with none."""
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    make_node("n1", 2)
    make_node("n2", 2)
    now = timezone.now()
    overdue_job = placed_job(owner, {"n1": [0], "n2": [0]}, grace=5)
    Attempt.objects.filter(job=overdue_job).update(state=AttemptState.NODE_LOST, ended_at=now - timedelta(seconds=8))
    Gpu.objects.filter(node__name="n1", allocated_to=overdue_job).update(allocated_to=None)  # the lost rank's
    patient = placed_job(owner, {"n1": [1], "n2": [1]}, grace=5)
    Attempt.objects.filter(job=patient).update(state=AttemptState.FAILED, ended_at=now - timedelta(seconds=6))
    resent = overdue.resend_overdue_commands(now)
    assert resent == [(protocol.AGENT_KILL, overdue_job.pk, 1)]
    assert sent.of(protocol.AGENT_KILL) == [
        ("n2", {"job_id": overdue_job.pk, "attempt": 1, "grace_period": 0.0, "reason": protocol.EXIT_STALE})
    ]


def test_ranks_waiting_for_the_others_to_complete_are_not_stopped(owner, sent, settings) -> None:
    """A rank that exited 0 ends the attempt's first node, not the attempt: the others run on."""
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    make_node("n1", 1)
    make_node("n2", 1)
    now = timezone.now()
    job = placed_job(owner, {"n1": [0], "n2": [0]}, grace=5)
    Attempt.objects.filter(job=job).update(state=AttemptState.COMPLETED, ended_at=now - timedelta(hours=1))
    Gpu.objects.filter(node__name="n1", allocated_to=job).update(allocated_to=None)
    assert overdue.resend_overdue_commands(now) == []

"""Commands whose effect is overdue are re-sent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster import overdue, protocol
from scheduler.models import Attempt, JobState
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

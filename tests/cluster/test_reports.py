"""Agent reports on the database: started and log lines, from the current attempt only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster import protocol, reports
from scheduler.models import Attempt, AttemptLog, AttemptState, JobEvent, JobState
from tests.support.live_helpers import make_node
from tests.support.placed_jobs import owner, placed_job  # noqa: F401 - owner is a fixture

pytestmark = pytest.mark.django_db


def test_started_moves_the_current_attempt_to_running(owner, sent) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.STARTING)
    started_at = timezone.now() - timedelta(seconds=1)
    assert reports.attempt_started("n1", job.pk, 1, 4242, started_at) is True
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job)
    assert job.state == JobState.RUNNING and job.started_at == started_at
    assert (attempt.state, attempt.pid, attempt.started_at) == (AttemptState.RUNNING, 4242, started_at)
    assert JobEvent.objects.filter(job=job, from_state=JobState.STARTING, to_state=JobState.RUNNING).count() == 1
    # A repeated report changes nothing more.
    assert reports.attempt_started("n1", job.pk, 1, 4242, started_at) is True
    assert JobEvent.objects.filter(job=job, to_state=JobState.RUNNING).count() == 1


def test_started_of_a_stale_attempt_stops_it(owner, sent, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, attempt=3)
    with django_capture_on_commit_callbacks(execute=True):
        assert reports.attempt_started("n1", job.pk, 2, 1, timezone.now()) is False
    assert sent.of(protocol.AGENT_KILL) == [
        ("n1", {"job_id": job.pk, "attempt": 2, "grace_period": 0.0, "reason": protocol.EXIT_STALE})
    ]
    assert Attempt.objects.get(job=job).state == AttemptState.RUNNING


def test_a_job_preempted_before_its_start_report_stays_preempting(owner, sent) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.PREEMPTING)
    Attempt.objects.filter(job=job).update(state=AttemptState.STARTING)
    reports.attempt_started("n1", job.pk, 1, 7, timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING and Attempt.objects.get(job=job).state == AttemptState.RUNNING


# --- logs --------------------------------------------------------------------------


def test_log_lines_are_stored_and_served_by_the_api(owner) -> None:
    from rest_framework.test import APIClient

    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    assert reports.append_log(job.pk, 1, ["step 1/3", "step 2/3"], timezone.now())
    assert reports.append_log(job.pk, 1, ["bad\x00byte"], timezone.now())
    assert reports.append_log(job.pk, 7, ["unknown attempt"], timezone.now()) is False
    api = APIClient()
    api.force_authenticate(owner)
    body = api.get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert body["attempt"] == 1 and body["lines"] == ["step 1/3", "step 2/3", "badbyte"]
    assert AttemptLog.objects.count() == 2


def test_each_line_of_a_job_on_two_nodes_is_labelled_with_its_node(owner) -> None:
    from scheduler.attempt_log import log_tail

    for name in ("n1", "n2"):
        make_node(name, 2)
    spread = placed_job(owner, {"n1": [0], "n2": [0]})
    assert reports.append_log(spread.pk, 1, ["rank 1 up", "step 1"], timezone.now(), node="n2")
    assert reports.append_log(spread.pk, 1, ["rank 0 up"], timezone.now(), node="n1")
    alone = placed_job(owner, {"n1": [1]})
    assert reports.append_log(alone.pk, 1, ["just me"], timezone.now(), node="n1")
    assert log_tail(Attempt.objects.get(job=spread).pk, 10).lines == ["[n2] rank 1 up", "[n2] step 1", "[n1] rank 0 up"]
    assert log_tail(Attempt.objects.get(job=alone).pk, 10).lines == ["just me"]


def test_the_started_event_names_the_node_and_for_a_job_on_two_nodes_both(owner, sent) -> None:
    for name in ("n1", "n2", "n3"):
        make_node(name, 1)
    spread = placed_job(owner, {"n1": [0], "n2": [0]}, state=JobState.STARTING)
    alone = placed_job(owner, {"n3": [0]}, state=JobState.STARTING)
    assert reports.attempt_started("n2", spread.pk, 1, 77, timezone.now()) is True
    assert reports.attempt_started("n1", spread.pk, 1, 78, timezone.now()) is True
    assert reports.attempt_started("n3", alone.pk, 1, 79, timezone.now()) is True
    started = dict(JobEvent.objects.filter(reason="Started").values_list("job_id", "message"))
    assert started == {spread.pk: "running on n1, n2 (n2 first, pid 77)", alone.pk: "running on n3 (pid 79)"}

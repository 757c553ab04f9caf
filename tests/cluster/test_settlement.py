"""How an attempt ends on the database: outcomes of exit reports, the preemption ledger, multi-node attempts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from cluster import protocol
from cluster.models import Gpu
from scheduler.models import Attempt, AttemptState, JobEvent, JobState
from tests.support.live_helpers import allocation_problems, make_node
from tests.support.placed_jobs import exit_report, owner, placed_job  # noqa: F401 - owner is a fixture

pytestmark = pytest.mark.django_db


# --- exited -------------------------------------------------------------------------

OUTCOMES = [
    # (job state, reason, exit code, attempt outcome, job state after)
    (JobState.RUNNING, None, 0, AttemptState.COMPLETED, JobState.COMPLETED),
    (JobState.RUNNING, None, 3, AttemptState.FAILED, JobState.FAILED),
    (JobState.RUNNING, protocol.EXIT_TIMEOUT, None, AttemptState.TIMEOUT, JobState.TIMEOUT),
    (JobState.STARTING, protocol.EXIT_LAUNCH_FAILED, None, AttemptState.FAILED, JobState.FAILED),
    (JobState.CANCELLING, protocol.EXIT_CANCEL, None, AttemptState.CANCELLED, JobState.CANCELLED),
    (JobState.CANCELLING, protocol.EXIT_LOST, None, AttemptState.NODE_LOST, JobState.CANCELLED),
    (JobState.PREEMPTING, protocol.EXIT_PREEMPT, 143, AttemptState.PREEMPTED, JobState.PENDING),
    (JobState.PREEMPTING, None, 0, AttemptState.COMPLETED, JobState.COMPLETED),  # finished before the notice
    (JobState.RUNNING, protocol.EXIT_LOST, None, AttemptState.NODE_LOST, JobState.PENDING),
    (JobState.RUNNING, protocol.EXIT_AGENT_STOP, 143, AttemptState.NODE_LOST, JobState.PENDING),
]


@pytest.mark.parametrize(("state", "reason", "code", "outcome", "after"), OUTCOMES)
def test_exit_outcomes(owner, sent, no_triggers, django_capture_on_commit_callbacks, state, reason, code, outcome,
                       after) -> None:
    make_node("n1", 2)
    job = placed_job(owner, {"n1": [0, 1]}, state=state)
    with django_capture_on_commit_callbacks(execute=True):
        assert exit_report(job, reason=reason, exit_code=code) == outcome
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job)
    assert attempt.state == outcome and attempt.exit_code == code and attempt.ended_at is not None
    assert job.state == after
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()
    assert no_triggers == ["cycle"]
    if after in (JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED):
        assert job.ended_at == attempt.ended_at and job.exit_code == code
    if after == JobState.PENDING:
        assert job.attempt_count == 1 and job.pending_reason in ("Preempted", "NodeLost")
    if outcome == AttemptState.NODE_LOST and after == JobState.PENDING:
        path = list(JobEvent.objects.filter(job=job).values_list("to_state", flat=True))
        assert path[-2:] == [JobState.NODE_LOST, JobState.PENDING]
    assert allocation_problems() == []


@pytest.mark.parametrize(("reason", "notice", "checkpointed", "says"), [
    (protocol.EXIT_AGENT_STOP, True, True,
     "attempt 1 lost on n1 (n1: its node agent was shut down and stopped it); checkpoint written"),
    (protocol.EXIT_AGENT_STOP, True, False, "attempt 1 lost on n1 (n1: its node agent was shut down and stopped it); "
                                            "no checkpoint: work since the last one is lost"),
    (protocol.EXIT_LOST, False, False, "attempt 1 lost on n1"),  # the agent could not see how it ended: no more said
])
def test_a_lost_attempt_says_why_when_its_node_said_so_and_what_it_kept(owner, sent, no_triggers, reason, notice,
                                                                        checkpointed, says) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    exit_report(job, reason=reason, exit_code=143 if notice else None, checkpointed=checkpointed,
                notice_at=timezone.now() if notice else None)
    job.refresh_from_db()
    assert (job.state, job.pending_reason, job.pending_message) == (JobState.PENDING, "NodeLost", says)
    lost = JobEvent.objects.filter(job=job, to_state=JobState.NODE_LOST).get()
    assert lost.message == says


def test_a_repeated_or_late_exit_report_changes_nothing(owner, sent, no_triggers) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    assert exit_report(job, exit_code=0) == AttemptState.COMPLETED
    events = JobEvent.objects.count()
    assert exit_report(job, exit_code=1) is None
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and JobEvent.objects.count() == events


def test_exit_of_an_old_attempt_does_not_touch_the_current_one(owner, sent, no_triggers) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, attempt=2)
    assert exit_report(job, attempt=1, exit_code=1) is None
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and Gpu.objects.filter(allocated_to=job).count() == 1


def test_preemption_ledger_with_a_checkpoint(owner, sent, no_triggers, settings) -> None:
    settings.SCHEDULER_RESUME_OVERHEAD = 5.0
    make_node("n1", 2)
    job = placed_job(owner, {"n1": [0, 1]}, state=JobState.PREEMPTING, attempt=2, progress_seconds=50.0)
    attempt = Attempt.objects.get(job=job)
    notice = attempt.started_at + timedelta(seconds=65)
    ended = notice + timedelta(seconds=3)
    exit_report(job, reason=protocol.EXIT_PREEMPT, exit_code=143, notice_at=notice, ended_at=ended, checkpointed=True)
    attempt.refresh_from_db()
    job.refresh_from_db()
    assert (attempt.notice_at, attempt.vacated_at, attempt.checkpointed) == (notice, ended, True)
    assert attempt.lost_gpu_seconds == 0.0
    assert job.progress_seconds == pytest.approx(50.0 + 65 - 5)  # work to the notice, minus resume overhead
    assert job.pending_message.endswith("checkpoint written")


def test_preemption_ledger_without_a_checkpoint(owner, sent, no_triggers, settings) -> None:
    settings.SCHEDULER_RESUME_OVERHEAD = 5.0
    make_node("n1", 2)
    job = placed_job(owner, {"n1": [0, 1]}, state=JobState.PREEMPTING, progress_seconds=0.0)
    attempt = Attempt.objects.get(job=job)
    notice = attempt.started_at + timedelta(seconds=40)
    exit_report(job, reason=protocol.EXIT_PREEMPT, exit_code=None, signal=9, notice_at=notice,
                ended_at=notice + timedelta(seconds=10), checkpointed=False)
    attempt.refresh_from_db()
    job.refresh_from_db()
    assert attempt.checkpointed is False and attempt.signal == 9
    assert attempt.lost_gpu_seconds == pytest.approx(2 * 40)  # first attempt: no resume overhead
    assert job.progress_seconds == 0.0


@pytest.mark.parametrize("markers, says", [
    ([True], "checkpoint written"),
    ([None], "checkpoint written"),  # an agent from before the field: as before
    ([False], "exited within its grace without writing the checkpoint marker (counted as checkpointed)"),
    ([False, True], "checkpoint written"),  # one node of two saw the marker written
])
def test_a_job_that_only_exited_within_its_grace_is_not_said_to_have_written_a_checkpoint(
        owner, sent, no_triggers, markers, says) -> None:
    nodes = {f"n{i + 1}": [0] for i in range(len(markers))}
    for name in nodes:
        make_node(name, 1)
    job = placed_job(owner, nodes, state=JobState.PREEMPTING)
    for name, marker in zip(nodes, markers, strict=True):
        exit_report(job, node=name, reason=protocol.EXIT_PREEMPT, exit_code=0, notice_at=timezone.now(),
                    checkpointed=True, checkpoint_marker=marker)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.pending_message.endswith(says)
    assert Attempt.objects.get(job=job).checkpointed is True
    browser = Client()
    browser.force_login(owner)
    ledger = browser.get(f"/jobs/{job.pk}/").content.decode().split("preemption ledger")[1]
    assert ("exited in grace</span></td>" in ledger) == (says != "checkpoint written")


def test_the_ledger_is_in_the_api_and_on_the_job_page(owner, sent, no_triggers) -> None:
    from django.test import Client
    from rest_framework.test import APIClient

    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.PREEMPTING)
    Attempt.objects.filter(job=job).update(preempted_for=None)
    exit_report(job, reason=protocol.EXIT_PREEMPT, exit_code=143, notice_at=timezone.now(), checkpointed=True)
    api = APIClient()
    api.force_authenticate(owner)
    (attempt,) = api.get(f"/api/v1/jobs/{job.pk}/").json()["attempts"]
    assert attempt["outcome"] == "PREEMPTED" and attempt["checkpointed"] is True
    assert attempt["notice_at"] and attempt["vacated_at"] and attempt["lost_gpu_seconds"] == 0.0
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/jobs/{job.pk}/").content.decode()
    assert "PREEMPTED" in page and "<td>yes</td>" in page


def test_a_multi_node_attempt_ends_with_its_last_node(owner, sent, no_triggers) -> None:
    make_node("n1", 2)
    make_node("n2", 2)
    job = placed_job(owner, {"n1": [0, 1], "n2": [0]}, state=JobState.PREEMPTING)
    assert exit_report(job, "n1", reason=protocol.EXIT_PREEMPT, exit_code=143, checkpointed=True,
                       notice_at=timezone.now()) == AttemptState.PREEMPTED
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING  # n2 still holds its GPU
    assert list(Gpu.objects.filter(allocated_to=job).values_list("node__name", flat=True)) == ["n2"]
    assert exit_report(job, "n2", reason=protocol.EXIT_PREEMPT, exit_code=None, signal=9, checkpointed=False,
                       notice_at=timezone.now()) == AttemptState.PREEMPTED
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job)
    assert job.state == JobState.PENDING and attempt.checkpointed is False  # every rank must have checkpointed
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()


def test_a_failing_rank_stops_the_other_nodes(owner, sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1)
    make_node("n2", 1)
    job = placed_job(owner, {"n1": [0], "n2": [0]}, grace=4)
    with django_capture_on_commit_callbacks(execute=True):
        assert exit_report(job, "n1", exit_code=2) == AttemptState.FAILED
    assert sent.of(protocol.AGENT_KILL) == [
        ("n2", {"job_id": job.pk, "attempt": 1, "grace_period": 4.0, "reason": protocol.EXIT_STALE})
    ]
    exit_report(job, "n2", reason=protocol.EXIT_STALE, exit_code=None, signal=15)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.exit_code == 2

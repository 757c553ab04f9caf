"""The job state machine (scheduler/transitions.py): the table, conditional moves, one event per transition."""

from __future__ import annotations

import pytest

from scheduler import transitions
from scheduler.models import ACTIVE_STATES, TERMINAL_STATES, Job, JobEvent, JobState
from tests.support.threads import run_together


def test_the_table_names_every_state_and_terminal_states_lead_nowhere() -> None:
    assert set(transitions.ALLOWED) == set(JobState)
    for state in TERMINAL_STATES:
        assert transitions.ALLOWED[state] == frozenset()
    for state, targets in transitions.ALLOWED.items():
        assert state not in targets  # no transition to the same state: it would record an event for nothing


def test_the_table_allows_the_documented_paths() -> None:
    allowed = transitions.ALLOWED
    assert JobState.STARTING in allowed[JobState.PENDING]
    assert JobState.RUNNING in allowed[JobState.STARTING]
    assert {JobState.PREEMPTING, JobState.CANCELLING, JobState.NODE_LOST} <= allowed[JobState.RUNNING]
    assert JobState.PENDING in allowed[JobState.PREEMPTING] and JobState.PENDING in allowed[JobState.NODE_LOST]
    for state in ACTIVE_STATES:
        assert JobState.CANCELLED in allowed[state]
    assert JobState.PENDING not in allowed[JobState.CANCELLING]  # a job being cancelled is never requeued
    assert JobState.RUNNING not in allowed[JobState.PENDING]  # a start always passes through STARTING


@pytest.mark.parametrize("from_state, to", [(JobState.COMPLETED, JobState.RUNNING), (JobState.PENDING, JobState.RUNNING),
                                            (JobState.CANCELLING, JobState.PENDING)])
def test_a_transition_outside_the_table_is_refused_before_anything_is_written(from_state, to) -> None:  # noqa: ANN001
    with pytest.raises(transitions.IllegalTransition, match=f"from {from_state} to {to}"):
        transitions.check([from_state], to)
    with pytest.raises(transitions.IllegalTransition):
        transitions.move_set([1], expect=[from_state], to=to)


@pytest.mark.django_db
def test_transition_moves_only_from_expected_states_and_records_one_event(roles, make_job) -> None:
    job = make_job(roles.owner)
    assert transitions.move(job.pk, expect={JobState.RUNNING}, to=JobState.COMPLETED) is False
    assert transitions.move(job.pk, expect={JobState.PENDING}, to=JobState.STARTING, reason="Scheduled",
                               message="on n1", attempt_count=1) is True
    job.refresh_from_db()
    assert (job.state, job.attempt_count) == (JobState.STARTING, 1)
    event = JobEvent.objects.filter(job=job).order_by("-id").first()
    assert (event.from_state, event.to_state, event.reason, event.message) == ("PENDING", "STARTING", "Scheduled",
                                                                               "on n1")
    assert transitions.move(job.pk + 999, expect={JobState.PENDING}, to=JobState.STARTING) is False



@pytest.mark.django_db
def test_move_refuses_an_expected_state_that_may_not_go_there(roles, make_job) -> None:
    job = make_job(roles.owner)
    with pytest.raises(transitions.IllegalTransition):
        transitions.move(job.pk, expect={JobState.PENDING, JobState.COMPLETED}, to=JobState.STARTING)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and not JobEvent.objects.filter(job=job, from_state=JobState.PENDING).exists()


@pytest.mark.django_db
def test_move_locked_moves_the_row_and_the_object_or_says_the_row_changed(roles, make_job) -> None:
    job = make_job(roles.owner, state=JobState.RUNNING)
    transitions.move_locked(job, JobState.COMPLETED, "Completed", "x" * 600, exit_code=0)
    stored = Job.objects.get(pk=job.pk)
    assert (job.state, stored.state, stored.exit_code) == (JobState.COMPLETED, JobState.COMPLETED, 0)
    event = JobEvent.objects.filter(job=job).order_by("-id").first()
    assert (event.from_state, event.to_state, len(event.message)) == ("RUNNING", "COMPLETED", transitions.MESSAGE_LENGTH)
    stale = Job.objects.get(pk=job.pk)
    stale.state = JobState.RUNNING  # what a writer read before another one moved the job
    with pytest.raises(RuntimeError, match="changed under its row lock"):
        transitions.move_locked(stale, JobState.FAILED, "Failed", "")


@pytest.mark.django_db
def test_move_set_moves_only_the_jobs_still_in_an_expected_state(roles, make_job) -> None:
    waiting = [make_job(roles.owner) for _ in range(3)]
    running = make_job(roles.owner, state=JobState.RUNNING)
    ids = [j.pk for j in waiting] + [running.pk]
    assert transitions.move_set(ids, expect=[JobState.PENDING], to=JobState.CANCELLED) == 3
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
    assert transitions.move_set([running.pk], expect=[JobState.RUNNING], to=JobState.PREEMPTING,
                                where={"attempt_count": running.attempt_count + 1}) == 0  # another attempt: no match
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_transitions_from_one_state_succeed_once(roles, make_job) -> None:
    job = make_job(roles.owner)
    targets = [JobState.STARTING, JobState.CANCELLED] * 4
    results = run_together([lambda t=t: transitions.move(job.pk, expect={JobState.PENDING}, to=t)
                            for t in targets])
    assert results.count(True) == 1 and results.count(False) == 7
    assert JobEvent.objects.filter(job=job, from_state=JobState.PENDING).count() == 1

"""The job state machine: the one module that writes ``Job.state``.

Every change of a job's state goes through this module: it checks the
change against :data:`ALLOWED` (which state may go to which), writes it as a
conditional ``UPDATE`` (only rows still in an expected state change, so two
writers never both move a job), and records each transition as a
``JobEvent`` stamped with its time. Submission creates a job in ``PENDING``
(``scheduler.services``); nothing else writes the column.

Three forms, for the three kinds of writer:

* :func:`move`: one job by id, from any of a set of states (cancellation);
  returns False when the job is in another state;
* :func:`move_locked`: one job whose row the caller holds locked (agent
  reports, node loss), which therefore must succeed;
* :func:`move_set` with :func:`record_events`: a set of jobs in one
  statement (a scheduling cycle's starts and preemptions), and their events
  in one ``bulk_create``.

A transition not in the table raises :class:`IllegalTransition`: a
programming error, never a race (races make the conditional update change
nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from scheduler import announce
from scheduler.bulkwrite import id_set, insert_objects
from scheduler.models import MESSAGE_LENGTH, Job, JobEvent, JobState

_ENDINGS = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED})
_REQUEUES = frozenset({JobState.PENDING, JobState.NODE_LOST})

#: Which state may go to which (docs/architecture.md, "Job states").
ALLOWED: dict[str, frozenset[str]] = {
    JobState.PENDING: frozenset({JobState.STARTING, JobState.CANCELLED}),
    JobState.STARTING: frozenset({JobState.RUNNING, JobState.PREEMPTING, JobState.CANCELLING})
    | _ENDINGS | _REQUEUES,
    JobState.RUNNING: frozenset({JobState.PREEMPTING, JobState.CANCELLING}) | _ENDINGS | _REQUEUES,
    JobState.PREEMPTING: frozenset({JobState.CANCELLING}) | _ENDINGS | _REQUEUES,
    # A job being cancelled ends; it is never requeued, whatever its last attempt's outcome.
    JobState.CANCELLING: _ENDINGS,
    JobState.NODE_LOST: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.TIMEOUT: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class IllegalTransition(ValueError):
    """A writer asked for a change of state the table does not allow."""


class Conflict(Exception):
    """A conditional write found the database changed since it was read (the decision is skipped)."""


def check(from_states: Iterable[str], to: str) -> None:
    """Raise IllegalTransition unless every state of ``from_states`` may go to ``to``."""
    for state in from_states:
        if to not in ALLOWED[state]:
            raise IllegalTransition(f"a job may not go from {state} to {to}")


def move(
    job_id: int,
    *,
    expect: Iterable[str],
    to: str,
    reason: str = "",
    message: str = "",
    at: datetime | None = None,
    **fields: object,
) -> bool:
    """Move job ``job_id`` to state ``to`` if it is in one of ``expect``; record the event.

    ``fields`` are further columns to set in the same conditional update.
    Returns False, changing nothing, when the job is missing or in another
    state. Runs in the caller's transaction if there is one.
    """
    expected = set(expect)
    check(expected, to)
    at = at or timezone.now()
    with transaction.atomic():
        # A re-read after a lost race, not a retry with backoff (nothing for tenacity to add): the state
        # may change between the read and the conditional update.
        for _ in range(3):
            current = Job.objects.filter(pk=job_id).values_list("state", flat=True).first()
            if current is None or current not in expected:
                return False
            if Job.objects.filter(pk=job_id, state=current).update(state=to, **fields) == 1:
                JobEvent.objects.create(job_id=job_id, at=at, from_state=current, to_state=to, reason=reason,
                                        message=message[:MESSAGE_LENGTH])
                return True
    return False


def move_locked(job: Job, to: str, reason: str, message: str, **fields: object) -> None:
    """Conditional state change of a job whose row the caller holds locked, with its event;
    the lock makes it succeed (RuntimeError otherwise). ``job.state`` becomes ``to``.

    The event is stamped now, under the row lock, so a job's events are in
    the order of the writes even when a report waited for the lock.
    """
    check([job.state], to)
    changed = Job.objects.filter(pk=job.pk, state=job.state, attempt_count=job.attempt_count).update(state=to, **fields)
    if changed != 1:
        raise RuntimeError(f"job {job.pk} changed under its row lock")
    JobEvent.objects.create(job=job, at=timezone.now(), from_state=job.state, to_state=to, reason=reason,
                            message=message[:MESSAGE_LENGTH])
    job.state = to


def move_set(ids: Iterable[int], *, expect: Iterable[str], to: str, where: dict | None = None,
             **fields: object) -> int:
    """Move the jobs ``ids`` still in one of ``expect`` (and matching ``where``) to ``to`` in one
    statement, setting ``fields`` too; returns how many moved. The caller records their events
    with :func:`record_events` (or :func:`record_event`) in the same transaction."""
    expected = list(dict.fromkeys(expect))
    check(expected, to)
    rows = Job.objects.filter(pk__in=id_set(ids), **(where or {}))
    rows = rows.filter(state=expected[0]) if len(expected) == 1 else rows.filter(state__in=expected)
    return rows.update(state=to, **fields)


def event(job_id: int, *, at: datetime, from_state: str, to: str, reason: str, message: str) -> JobEvent:
    """An unsaved JobEvent of one transition (for :func:`record_events`), its message cut to length."""
    return JobEvent(job_id=job_id, at=at, from_state=from_state, to_state=to, reason=reason,
                    message=message[:MESSAGE_LENGTH])


#: Sent after :func:`record_events` stored a batch (``events=``: the saved rows), since bulk_create
#: sends no ``post_save``; listeners (notifications) must not write and must be safe in a transaction.
events_recorded = Signal()


def record_events(events: list[JobEvent]) -> None:
    """Store transitions with one statement per 5,000 (``scheduler.bulkwrite.insert_objects``),
    giving each its primary key; no ``post_save`` is sent, so the jobs are announced here and
    listeners hear :data:`events_recorded`."""
    insert_objects(events)
    events_recorded.send(sender=JobEvent, events=events)
    announce.jobs_changed(e.job_id for e in events)


def record_event(job_id: int, *, at: datetime, from_state: str, to: str, reason: str, message: str) -> JobEvent:
    """Store one transition (its ``post_save`` signal announces the job)."""
    return JobEvent.objects.create(job_id=job_id, at=at, from_state=from_state, to_state=to, reason=reason,
                                   message=message[:MESSAGE_LENGTH])

"""Holding a waiting job back, and releasing it (Slurm's ``scontrol hold`` and ``release``).

A held job stays PENDING, keeps its place by age and priority, and is never started
until it is released: the snapshot gives it the pending reason ``JobHeldUser`` or
``JobHeldAdmin`` (``reason_of``), which every policy treats as a hold, so it gets no
GPUs, preempts nobody and is forecast no start.

Who may do what, as in Slurm: the owner holds and releases their own job (a user
hold); staff holding someone else's job place an administrator's hold, which only
staff release. Only a PENDING job can be held; releasing a job that is not held
changes nothing. Each change is one event on the job's timeline and asks for a
scheduling cycle, so a released job can start at once.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduler import arrays, selectors, transitions
from scheduler.core.decisions import Reason
from scheduler.models import MESSAGE_LENGTH, TERMINAL_STATES, Job, JobHold, JobState
from scheduler.triggers import request_scheduling

_REASONS = {JobHold.USER: Reason.JOB_HELD_USER, JobHold.ADMIN: Reason.JOB_HELD_ADMIN}
#: The pending reasons of a person's hold (a snapshot's ``hold_reason``): such a job has no queue position.
BY_PERSON = frozenset(r.value for r in _REASONS.values())


class HoldRefused(Exception):
    """The job cannot be held or released now; ``conflict``: because of its state (else: the caller's role)."""

    def __init__(self, job: Job, message: str, conflict: bool = True) -> None:
        super().__init__(message)
        self.job = job
        self.conflict = conflict


def reason_of(hold: str, job_id: int) -> tuple[str, str]:
    """``(pending reason, message)`` of a job held by ``hold`` (a ``JobHold`` value other than none)."""
    if hold == JobHold.ADMIN:
        return _REASONS[JobHold.ADMIN].value, "held by an administrator; staff release it"
    return _REASONS[JobHold.USER].value, f"held by its owner: `gpusched release {job_id}` lets it start"


def hold_kind(job: Job, by: Any) -> str:
    """The hold ``by`` places on ``job``: the owner's own is a user hold, staff's on another's an admin hold."""
    return JobHold.USER if by.pk == job.owner_id else JobHold.ADMIN


def may_release(job: Job, by: Any) -> bool:
    """Whether ``by`` may release ``job``'s hold: any hold for staff, a user hold for anyone who sees the job."""
    return bool(job.hold) and (by.is_staff or job.hold != JobHold.ADMIN)


def hold_job(job: Job, by: Any) -> Job:
    """Hold ``job`` (which ``by`` may see): it stays PENDING and does not start until released.

    Raises ``HoldRefused`` when the job is not PENDING (``conflict``), or when a user would
    replace an administrator's hold with their own (not ``conflict``). Holding a held job again
    by the same kind of hold changes nothing. Returns the job as stored."""
    kind = hold_kind(job, by)
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state != JobState.PENDING:
            raise HoldRefused(locked, f"job {locked.pk} is {locked.state}: only a PENDING job can be held")
        if locked.hold == kind:
            return locked
        if locked.hold == JobHold.ADMIN and not by.is_staff:
            raise HoldRefused(locked, f"job {locked.pk} is held by an administrator", conflict=False)
        reason, message = reason_of(kind, locked.pk)
        _change(locked, kind, reason, message, f"held by {by.get_username()}")
    transaction.on_commit(lambda: request_scheduling())  # the queue positions and forecasts behind it move up
    return locked


def release_job(job: Job, by: Any) -> Job:
    """Release ``job``'s hold so that it may start. A user releases only their own hold; staff
    release any. Raises ``HoldRefused`` for a finished job (``conflict``) or an administrator's
    hold released by a user (not ``conflict``); a job not held is returned unchanged."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state in TERMINAL_STATES:
            raise HoldRefused(locked, f"job {locked.pk} is {locked.state}: it has ended")
        if not locked.hold:
            return locked
        if not may_release(locked, by):
            raise HoldRefused(locked, f"job {locked.pk} is held by an administrator: only staff release it",
                              conflict=False)
        _change(locked, JobHold.NONE, "Released", "", f"released by {by.get_username()}")
    transaction.on_commit(lambda: request_scheduling())
    return locked


def _change(job: Job, hold: str, reason: str, message: str, event_message: str) -> None:
    """Store the new hold (and, for a hold, the pending reason and ``message`` at once, as the next
    cycle writes them, so every page says so before it) with one event on the job's timeline
    (``event_message``: who did it), whose signal announces the job to its viewers."""
    now = timezone.now()
    fields = {"hold": hold}
    if hold:
        fields.update(pending_reason=reason, pending_message=message[:MESSAGE_LENGTH])
    Job.objects.filter(pk=job.pk).update(**fields)
    for name, value in fields.items():
        setattr(job, name, value)
    transitions.record_event(job.pk, at=now, from_state=job.state, to=job.state, reason=reason,
                             message=event_message)


def for_array(job: Job, by: Any, change: Any, whole: bool = True) -> list[Job]:
    """``change`` (``hold_job`` or ``release_job``) applied to ``job``, or, when ``whole`` and ``job``
    heads an array, to each of its tasks ``by`` may see that has not ended (those a hold cannot take,
    not PENDING, are passed over; ``arrays.for_each_task``)."""
    return arrays.for_each_task(job, by, lambda task: change(task, by),
                                lambda exc: isinstance(exc, HoldRefused) and exc.conflict, whole)

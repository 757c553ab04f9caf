"""Changing a waiting job's priority after submission (Slurm's ``scontrol update JobId=12 Priority=5``).

A job submitted with the wrong priority had to be cancelled and submitted again, losing its
place by age. Now the priority of a PENDING job may be changed, under the rules of
submission: the owner within the range their quotas and the job's project allow (the same
messages, under the field ``priority``), staff on another user's job anywhere in the global
range (an administrator's decision, which the API audits). A running job keeps the priority
it started with. The change is one event on the job's timeline and asks for a scheduling
cycle, so the queue and the forecasts follow at once.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduler import arrays, projects, quotas, transitions
from scheduler.models import PRIORITY_RANGE, Job, JobState
from scheduler.selectors import quota_usage
from scheduler.triggers import request_scheduling


class PriorityRefused(Exception):
    """The priority cannot be changed: ``conflict`` when the job is not PENDING, else the value is out of range."""

    def __init__(self, job: Job, message: str, conflict: bool) -> None:
        super().__init__(message)
        self.job = job
        self.conflict = conflict


def range_problem(job: Job, by: Any, priority: int) -> str | None:
    """Why ``by`` may not give ``job`` the priority ``priority``, or None: the global range for
    staff acting on another user's job; else the owner's quota ranges and the job's project's."""
    low, high = PRIORITY_RANGE
    if by.is_staff and by.pk != job.owner_id:
        return None if low <= priority <= high else f"Must be between {low} and {high}."
    scopes = quota_usage(user_ids=[job.owner_id]).scopes_for(job.owner_id)
    return quotas.priority_error(priority, scopes, PRIORITY_RANGE) or projects.priority_problem(job.project, priority)


def change_priority(job: Job, by: Any, priority: int) -> Job:
    """Give the PENDING ``job`` (which ``by`` may see) the priority ``priority``. Raises
    ``PriorityRefused`` (``conflict``) for a job that is not PENDING, or (not ``conflict``) for a
    priority outside what ``by`` may set; nothing is written then. The same priority again
    changes nothing. Returns the job as stored."""
    with transaction.atomic():
        locked = Job.objects.select_related("project").select_for_update(of=("self",)).get(pk=job.pk)
        if locked.state != JobState.PENDING:
            raise PriorityRefused(locked, f"job {locked.pk} is {locked.state}: only a PENDING job's priority "
                                          "can be changed", conflict=True)
        problem = range_problem(locked, by, priority)
        if problem:
            raise PriorityRefused(locked, problem, conflict=False)
        if locked.priority == priority:
            return locked
        before, locked.priority = locked.priority, priority
        Job.objects.filter(pk=locked.pk).update(priority=priority)
        transitions.record_event(locked.pk, at=timezone.now(), from_state=locked.state, to=locked.state,
                                 reason="PriorityChanged",
                                 message=f"priority {before} -> {priority} by {by.get_username()}")
    transaction.on_commit(lambda: request_scheduling())
    return locked


def change_priority_of(job: Job, by: Any, priority: int, whole: bool = True) -> list[Job]:
    """``change_priority`` on ``job``, or, when ``whole`` and ``job`` heads an array, on each of its
    waiting tasks ``by`` may see (``arrays.for_each_task``: a task that started is passed over; a
    priority out of range stops at the first task, before any is changed, since every task has the
    same owner and project). Returns the jobs as stored."""
    return arrays.for_each_task(job, by, lambda task: change_priority(task, by, priority),
                                lambda exc: isinstance(exc, PriorityRefused) and exc.conflict, whole)

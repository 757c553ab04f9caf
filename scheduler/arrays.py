"""Job arrays on the live cluster: finding a task by ``ID_INDEX`` and cancelling a whole array.

An array's id is its first task's job id (``Job.array_id``); ``ID`` alone names
that job, and for cancellation the whole array, as ``scancel ID`` does. What a
user may see or cancel is what ``scheduler.selectors.visible_jobs`` shows them:
another user's array is no array to them.
"""

from __future__ import annotations

from scheduler import selectors, services
from scheduler.core.arrays import parse_task
from scheduler.models import TERMINAL_STATES, Job


def visible_task_id(user, text: str) -> int | None:  # noqa: ANN001 - a user model instance
    """The job id ``text`` names (``12`` or ``12_3``) among the jobs ``user`` may see; None when none."""
    parsed = parse_task(text)
    if parsed is None:
        return None
    array_id, index = parsed
    if index is None:
        return array_id
    return selectors.visible_jobs(user).filter(array_id=array_id, array_index=index).values_list(
        "pk", flat=True).first()


def cancel_array(job: Job, by) -> list[Job]:  # noqa: ANN001 - a user model instance
    """Cancel every unfinished task of the array whose id is ``job``'s own (``job`` first); for a job
    that heads no array, ``job`` alone (``services.cancel_job`` rules, ``JobNotCancellable`` included)."""
    if job.array_id != job.pk:
        return [services.cancel_job(job, by)]
    tasks = selectors.visible_jobs(by).filter(array_id=job.pk).exclude(state__in=TERMINAL_STATES).order_by("pk")
    done = []
    for task in tasks:
        try:
            done.append(services.cancel_job(task, by))
        except services.JobNotCancellable:
            continue  # it finished meanwhile
    if not done:
        services.cancel_job(job, by)  # every task had finished: the same answer as for a single job
    return done

"""Job arrays on the live cluster: finding a task by ``ID_INDEX``, and changing a whole array.

An array's id is its first task's job id (``Job.array_id``); ``ID`` alone names
that job, and for a cancel, hold, release or priority change the whole array, as
``scancel ID`` and ``scontrol hold ID`` do; ``ID_0`` names its first task alone. What a
user may see or cancel is what ``scheduler.selectors.visible_jobs`` shows them:
another user's array is no array to them.
"""

from __future__ import annotations

from typing import Callable

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


def names_array(text: str) -> bool:
    """Whether ``text`` is a bare id (``12``), which names the whole array when its job heads one;
    ``12_0`` names task 0 alone, as in Slurm."""
    parsed = parse_task(text)
    return parsed is not None and parsed[1] is None


def for_each_task(job: Job, by, change: Callable[[Job], Job], passed_over: Callable[[Exception], bool],  # noqa: ANN001
                  whole: bool = True) -> list[Job]:
    """``change`` applied to ``job`` alone, or, when ``whole`` and ``job`` heads an array, to each of
    its unfinished tasks ``by`` may see, in id order. A task whose change raises an exception that
    ``passed_over`` accepts (the task is not in the state the change needs: it ended, or runs) is
    passed over, any other stops there; when no task is left, the head's own answer is given, as
    for one job. Returns the jobs changed."""
    if not whole or job.array_id != job.pk:
        return [change(job)]
    done = []
    for task in selectors.visible_jobs(by).filter(array_id=job.pk).exclude(state__in=TERMINAL_STATES).order_by("pk"):
        try:
            done.append(change(task))
        except Exception as exc:  # noqa: BLE001 - re-raised unless passed_over accepts it
            if not passed_over(exc):
                raise
    return done or [change(job)]


def cancel_array(job: Job, by, whole: bool = True) -> list[Job]:  # noqa: ANN001 - a user model instance
    """Cancel ``job``, or every unfinished task of the array it heads (``for_each_task``), by the rules
    of ``services.cancel_job`` (``JobNotCancellable`` included)."""
    return for_each_task(job, by, lambda task: services.cancel_job(task, by),
                         lambda exc: isinstance(exc, services.JobNotCancellable), whole)

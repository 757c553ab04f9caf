"""Job dependencies on the live cluster (the rules are ``scheduler.core.dependencies``).

* At submission, ``resolve`` checks a dependency text: it parses, every job it
  names exists and belongs to the submitter or to the project the new job is
  charged to (another user's job is refused with the same words as a job that
  does not exist, so ids of others' jobs reveal nothing), and the stored text
  is the canonical one, an array's id replaced by the ids of all its tasks. ``refuse_cycle`` then checks, inside the submission's
  transaction, that the new job closes no cycle of waits.
* Each cycle, ``evaluate`` tells the snapshot which pending jobs are held
  with the reason ``Dependency`` and which can never run; ``cancel_never_satisfied``
  cancels the latter with the reason ``DependencyNeverSatisfied``.

A job's outcome for a dependency: COMPLETED is success; FAILED, TIMEOUT and
CANCELLED are not; any other state has not ended yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import NamedTuple

from django.db.models import Q

from scheduler import transitions
from scheduler.core import dependencies as core
from scheduler.models import Job, JobState

#: The reason a job whose dependency can never be satisfied is cancelled with (Slurm's).
NEVER_SATISFIED = "DependencyNeverSatisfied"

_OUTCOMES = {JobState.COMPLETED: core.Outcome.OK, JobState.FAILED: core.Outcome.NOT_OK,
             JobState.TIMEOUT: core.Outcome.NOT_OK, JobState.CANCELLED: core.Outcome.NOT_OK}


def outcome(state: str) -> core.Outcome:
    """What a job in ``state`` counts as for a dependency."""
    return _OUTCOMES.get(state, core.Outcome.WAITING)


def resolve(owner, project, text: str) -> tuple[str, str]:  # noqa: ANN001 - a user and a Project (or None)
    """The canonical dependency text and an error for the field ``dependency`` ("" when valid)."""
    try:
        clauses = core.parse(text or "")
    except core.DependencyError as exc:
        return "", str(exc)
    named = core.job_ids(clauses)
    not_numbers = sorted(i for i in named if not i.isdigit() or len(i) > 18)
    if not_numbers:
        return "", f"{not_numbers[0]!r} is not a job id"
    if not named:
        return "", ""
    mine = Q(owner=owner) | (Q(project=project) if project is not None else Q(pk__in=[]))
    found = {str(pk) for pk in Job.objects.filter(mine, pk__in=[int(i) for i in named]).values_list("pk", flat=True)}
    missing = sorted(named - found, key=int)
    if missing:
        return "", f"no job {missing[0]} of yours or of this job's project"
    text = core.render(_with_array_tasks(clauses))
    if len(text) > Job._meta.get_field("dependency").max_length:
        return "", "names too many jobs (an array counts as all its tasks); wait for fewer"
    return text, ""


def _with_array_tasks(clauses: tuple[core.Dependency, ...]) -> list[core.Dependency]:
    """An array's id stands for every task of the array, as in Slurm (one query)."""
    tasks: dict[str, list[str]] = {}
    named = [int(i) for i in core.job_ids(clauses)]
    for array_id, pk in Job.objects.filter(array_id__in=named).order_by("pk").values_list("array_id", "pk"):
        tasks.setdefault(str(array_id), []).append(str(pk))
    return [core.Dependency(c.kind, tuple(dict.fromkeys(t for i in c.job_ids for t in tasks.get(i, [i]))))
            for c in clauses]


def refuse_cycle(job: Job) -> str:
    """A message naming the cycle ``job`` (saved, in the open transaction) closes, or ""."""
    edges: dict[str, set[str]] = {}
    frontier = {str(job.pk)}
    texts = {str(job.pk): job.dependency}
    while frontier:
        for pk in frontier:
            edges[pk] = core.job_ids(core.parse(texts.get(pk, "")))
        frontier = {i for named in edges.values() for i in named} - edges.keys()
        texts.update((str(pk), dep) for pk, dep in Job.objects.filter(pk__in=[int(i) for i in frontier])
                     .values_list("pk", "dependency"))
    cycle = core.find_cycle(edges)
    return f"dependency cycle: {' -> '.join(cycle)}" if cycle else ""


class Evaluated(NamedTuple):
    """The pending jobs a dependency holds (with their messages), those it never will let run (with
    why), and, for the held ones a forecast can release, the clauses still awaited
    (``scheduler.core.dependencies.awaited``)."""

    held: dict[int, str]
    never: dict[int, str]
    awaited: dict[int, tuple[core.Dependency, ...]]


def evaluate(pending: Iterable[tuple[int, str]]) -> Evaluated:
    """Evaluate pending ``(job id, dependency text)`` pairs (one query for the states of every job named)."""
    parsed = {pk: core.parse(text) for pk, text in pending if text}
    named = {int(i) for clauses in parsed.values() for i in core.job_ids(clauses)}
    outcomes = {str(pk): outcome(state) for pk, state in Job.objects.filter(pk__in=named).values_list("pk", "state")}
    result = Evaluated({}, {}, {})
    for pk, clauses in parsed.items():
        found = core.status(clauses, outcomes)
        if found is core.Status.WAITING:
            result.held[pk] = core.waiting_message(clauses, outcomes)
            left = core.awaited(clauses, outcomes)
            if left is not None:
                result.awaited[pk] = left
        elif found is core.Status.NEVER:
            result.never[pk] = core.never_message(clauses, outcomes)
    return result


def cancel_never_satisfied(never: Mapping[int, str], at: datetime) -> list[int]:
    """Cancel the still-pending jobs of ``never`` (reason ``DependencyNeverSatisfied``); returns those cancelled."""
    done = []
    for pk, message in sorted(never.items()):
        if transitions.move(pk, expect={JobState.PENDING}, to=JobState.CANCELLED, reason=NEVER_SATISFIED,
                            message=message, at=at, ended_at=at, pending_reason="", pending_message=""):
            done.append(pk)
    return done

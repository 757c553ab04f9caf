"""Quota semantics: what each limit means and when it blocks a job.

This module is pure: it reads plain objects and never touches the database.
``scheduler.selectors.quota_usage`` builds a ``UsageSnapshot`` (in a few
queries, once per scheduling cycle or request); the checks here then answer
for any number of jobs.

Scopes. A user is bound by their own quota (if any) and by the quota of every
group they belong to (if any). A group's usage is the sum of its members'
usage. A job passes only if it passes every scope, so the effective limit is
the tightest one. An empty (None) limit means "no limit".

Limits, and when they are checked:

=================  ===================================================  ===========  ==========
limit              meaning                                              submission   scheduling
=================  ===================================================  ===========  ==========
max_gpus           GPUs held at once by running jobs (all classes)      job > limit  held + job > limit
max_te_gpus        GPUs held at once by running TE jobs                 job > limit  held + job > limit
max_te_job_gpus    GPUs of one TE job                                   job > limit  job > limit
max_te_runtime     time limit of one TE job (s); a TE job without one   tl > limit   tl > limit
                   gets this value at submission
gpu_hours_budget   GPU-hours used over the last ``budget_period_days``  used >= b    used >= b
max_pending_jobs   jobs PENDING at once                                 pending >= l (not checked)
=================  ===================================================  ===========  ==========

At submission a job is refused only when it could never start under the
limit as it stands (or would exceed the pending count); a job that merely has
to wait for the user's other jobs is accepted and stays PENDING with reason
``QuotaExceeded`` until it fits.

"Held" GPUs are those of jobs in STARTING, RUNNING, PREEMPTING or CANCELLING,
counted as the GPUs their current attempt holds (``held_gpus``), not the
``num_gpus`` they asked for: a reconfigurable job may run on more or fewer.
A job checkpointing to be reconfigured onto more GPUs counts its target
already, so the grow keeps its room in the quota until it relaunches.

"job" at scheduling time is the GPU count the job will get: a decision's
placement in the apply step (``blocking_reason(job, usage, gpus)``), else
the job's pinned reconfiguration target or its request (``asked_gpus``). A
reconfiguration that grows a running job is checked by ``grow_violation``
with the extra GPUs as "job" (and the new size for the per-job limit); a
shrink is never held. At submission "job" is the request.

GPU-hours count every attempt's GPUs (its allocation) times the part of its
run (start to end, or to now if still running) that lies in the rolling
period.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from scheduler.gpu_allocation import gpu_count

QUOTA_EXCEEDED = "QuotaExceeded"
DEFAULT_BUDGET_PERIOD_DAYS = 7

#: The limits of a quota, in the order they are checked.
LIMIT_NAMES = (
    "max_te_job_gpus",
    "max_te_runtime",
    "max_gpus",
    "max_te_gpus",
    "max_pending_jobs",
    "gpu_hours_budget",
)


class JobLike(Protocol):
    """What the checks read from a job (a ``Job`` row or any similar object)."""

    owner_id: int
    job_class: str
    num_gpus: int
    time_limit: int | None


def asked_gpus(job: JobLike) -> int:
    """The GPUs a pending job would start on when no placement is known: its pinned
    reconfiguration target (``target_gpus``, if the object has one and it is set), else
    its request."""
    return getattr(job, "target_gpus", 0) or job.num_gpus


def held_gpus(num_gpus: int, allocation: dict[str, list[int]] | None, *, growing_to: int = 0) -> int:
    """The GPUs a job in an active state counts against quotas.

    ``allocation`` is its current attempt's ``{node: [gpu indices]}``; None (no
    attempt found, which the loop treats as an error) counts the request, so a
    damaged row never frees quota. ``growing_to`` is the target of a
    reconfiguration the job checkpoints for (0: none); a grow counts its
    target from the decision on, a shrink its current GPUs until they are
    vacated.
    """
    held = num_gpus if allocation is None else gpu_count(allocation)
    return max(held, growing_to)


@dataclass(frozen=True, slots=True)
class Limits:
    max_gpus: int | None = None
    max_te_gpus: int | None = None
    max_te_job_gpus: int | None = None
    max_te_runtime: int | None = None
    gpu_hours_budget: float | None = None
    budget_period_days: int = DEFAULT_BUDGET_PERIOD_DAYS
    max_pending_jobs: int | None = None
    min_priority: int | None = None
    max_priority: int | None = None

    @classmethod
    def of(cls, quota: object) -> "Limits":
        """Read the limits off a ``Quota`` row (or anything with the same attributes)."""
        return cls(
            max_gpus=quota.max_gpus,
            max_te_gpus=quota.max_te_gpus,
            max_te_job_gpus=quota.max_te_job_gpus,
            max_te_runtime=quota.max_te_runtime,
            gpu_hours_budget=quota.gpu_hours_budget,
            budget_period_days=quota.budget_period_days,
            max_pending_jobs=quota.max_pending_jobs,
            min_priority=getattr(quota, "min_priority", None),
            max_priority=getattr(quota, "max_priority", None),
        )

    def as_dict(self) -> dict[str, int | float | None]:
        return {
            "max_gpus": self.max_gpus,
            "max_te_gpus": self.max_te_gpus,
            "max_te_job_gpus": self.max_te_job_gpus,
            "max_te_runtime": self.max_te_runtime,
            "gpu_hours_budget": self.gpu_hours_budget,
            "budget_period_days": self.budget_period_days,
            "max_pending_jobs": self.max_pending_jobs,
            "min_priority": self.min_priority,
            "max_priority": self.max_priority,
        }


@dataclass(slots=True)
class Usage:
    """What a user or a group holds now; ``gpu_hours`` is over the scope's period."""

    gpus: int = 0
    te_gpus: int = 0
    gpu_hours: float = 0.0
    pending_jobs: int = 0

    def as_dict(self) -> dict[str, int | float]:
        return {
            "gpus": self.gpus,
            "te_gpus": self.te_gpus,
            "gpu_hours": round(self.gpu_hours, 3),
            "pending_jobs": self.pending_jobs,
        }


@dataclass(slots=True, eq=False)
class Scope:
    """One quota and the usage counted against it. Group scopes are shared by all members."""

    kind: str  # "user" or "group"
    name: str
    limits: Limits
    usage: Usage = field(default_factory=Usage)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Violation:
    """A limit a job does not fit; the fields of the API's 403 body."""

    limit: str
    limit_value: int | float
    current_usage: int | float
    requested: int | float | None
    scope: str
    message: str
    reason: str = QUOTA_EXCEEDED


@dataclass(slots=True)
class UsageSnapshot:
    """The scopes binding each user, with usage, at one moment.

    ``own`` is each known user's own usage (also for users without any quota);
    ``scopes`` lists the scopes binding a user (empty: no limits);
    ``by_quota`` maps a quota's id to its scope.
    """

    scopes: dict[int, list[Scope]] = field(default_factory=dict)
    own: dict[int, Usage] = field(default_factory=dict)
    by_quota: dict[int, Scope] = field(default_factory=dict)

    def scopes_for(self, user_id: int) -> list[Scope]:
        return self.scopes.get(user_id, [])

    def charge(self, job: JobLike, gpus: int | None = None) -> None:
        """Count pending ``job`` as holding ``gpus`` (default ``asked_gpus(job)``) from now on
        (the loop started it this cycle)."""
        self._add(job, asked_gpus(job) if gpus is None else gpus, started=True)

    def charge_grow(self, job: JobLike, extra: int) -> None:
        """Count running ``job`` as holding ``extra`` more GPUs (the loop grew it this cycle)."""
        self._add(job, extra, started=False)

    def _add(self, job: JobLike, gpus: int, *, started: bool) -> None:
        te = job.job_class == "TE"
        usages = [s.usage for s in self.scopes_for(job.owner_id)]
        if job.owner_id in self.own:
            usages.append(self.own[job.owner_id])
        for usage in usages:
            usage.gpus += gpus
            if te:
                usage.te_gpus += gpus
            if started:
                usage.pending_jobs = max(0, usage.pending_jobs - 1)


def priority_error(priority: int, scopes: list[Scope], default: tuple[int, int]) -> str | None:
    """Why ``priority`` is outside the range the scopes allow (the tightest
    of their ranges within ``default``), or None when it is inside."""
    low, high = default
    low_by, high_by = "", ""
    for s in scopes:
        if s.limits.min_priority is not None and s.limits.min_priority > low:
            low, low_by = s.limits.min_priority, s.label
        if s.limits.max_priority is not None and s.limits.max_priority < high:
            high, high_by = s.limits.max_priority, s.label
    if low <= priority <= high:
        return None
    if low > high:
        return f"No priority is allowed: the quotas' ranges do not overlap ({low_by} from {low}, {high_by} to {high})."
    by = high_by if priority > high else low_by
    return f"Must be between {low} and {high}" + (f" (quota of {by})." if by else ".")


def effective_te_runtime(scopes: list[Scope]) -> int | None:
    """The longest TE time limit allowed by all scopes (None: unlimited)."""
    values = [s.limits.max_te_runtime for s in scopes if s.limits.max_te_runtime is not None]
    return min(values) if values else None


def _per_job_violation(job: JobLike, scope: Scope, size: int | None = None) -> Violation | None:
    """Limits on one TE job's size (``size`` GPUs; default its request) and runtime, whatever else runs."""
    limits = scope.limits
    if job.job_class != "TE":
        return None
    size = job.num_gpus if size is None else size
    if limits.max_te_job_gpus is not None and size > limits.max_te_job_gpus:
        return Violation(
            "max_te_job_gpus", limits.max_te_job_gpus, size, size, scope.label,
            f"a TE job may use at most {limits.max_te_job_gpus} GPUs ({scope.label}); this one asks for {size}",
        )
    if limits.max_te_runtime is not None and job.time_limit is not None and job.time_limit > limits.max_te_runtime:
        return Violation(
            "max_te_runtime", limits.max_te_runtime, job.time_limit, job.time_limit, scope.label,
            f"a TE job may run at most {limits.max_te_runtime} s ({scope.label}); this one asks for {job.time_limit} s",
        )
    return None


def _budget_violation(scope: Scope) -> Violation | None:
    limits, usage = scope.limits, scope.usage
    if limits.gpu_hours_budget is not None and usage.gpu_hours >= limits.gpu_hours_budget:
        return Violation(
            "gpu_hours_budget", limits.gpu_hours_budget, round(usage.gpu_hours, 3), None, scope.label,
            f"GPU-hour budget of {limits.gpu_hours_budget:g} over {limits.budget_period_days} days is used up "
            f"({usage.gpu_hours:.2f} used, {scope.label})",
        )
    return None


def check_submission(job: JobLike, scopes: list[Scope]) -> Violation | None:
    """The first limit that refuses ``job`` at submission, or None.

    ``job.time_limit`` must already carry the TE default (``effective_te_runtime``).
    """
    for scope in scopes:
        limits, usage = scope.limits, scope.usage
        found = _per_job_violation(job, scope)
        if found:
            return found
        if limits.max_gpus is not None and job.num_gpus > limits.max_gpus:
            return Violation(
                "max_gpus", limits.max_gpus, usage.gpus, job.num_gpus, scope.label,
                f"at most {limits.max_gpus} GPUs at once ({scope.label}); this job alone asks for {job.num_gpus}",
            )
        if job.job_class == "TE" and limits.max_te_gpus is not None and job.num_gpus > limits.max_te_gpus:
            return Violation(
                "max_te_gpus", limits.max_te_gpus, usage.te_gpus, job.num_gpus, scope.label,
                f"at most {limits.max_te_gpus} GPUs at once for TE jobs ({scope.label}); "
                f"this job alone asks for {job.num_gpus}",
            )
        if limits.max_pending_jobs is not None and usage.pending_jobs >= limits.max_pending_jobs:
            return Violation(
                "max_pending_jobs", limits.max_pending_jobs, usage.pending_jobs, 1, scope.label,
                f"at most {limits.max_pending_jobs} pending jobs ({scope.label}); {usage.pending_jobs} are pending",
            )
        found = _budget_violation(scope)
        if found:
            return found
    return None


def scheduling_violation(job: JobLike, usage: UsageSnapshot, gpus: int | None = None) -> Violation | None:
    """The first limit that keeps pending ``job`` from starting now on ``gpus`` GPUs
    (default ``asked_gpus(job)``), or None."""
    gpus = asked_gpus(job) if gpus is None else gpus
    return _held_violation(job, usage, size=gpus, extra=gpus,
                           needs=f"this job needs {gpus} more")


def grow_violation(job: JobLike, usage: UsageSnapshot, size: int, extra: int) -> Violation | None:
    """The first limit that keeps running ``job`` from growing to ``size`` GPUs, ``extra`` more
    than it holds, or None. A shrink (``extra <= 0``) is never held: it frees GPUs."""
    if extra <= 0:
        return None
    return _held_violation(job, usage, size=size, extra=extra,
                           needs=f"growing this job to {size} GPUs needs {extra} more")


def _held_violation(job: JobLike, usage: UsageSnapshot, *, size: int, extra: int, needs: str) -> Violation | None:
    """The per-job limits on ``size``, then held + ``extra`` against the concurrent limits,
    then the budget, scope by scope."""
    for scope in usage.scopes_for(job.owner_id):
        limits, held = scope.limits, scope.usage
        found = _per_job_violation(job, scope, size)
        if found:
            return found
        if limits.max_gpus is not None and held.gpus + extra > limits.max_gpus:
            return Violation(
                "max_gpus", limits.max_gpus, held.gpus, extra, scope.label,
                f"{scope.label} holds {held.gpus} of {limits.max_gpus} GPUs; {needs}",
            )
        if job.job_class == "TE" and limits.max_te_gpus is not None and held.te_gpus + extra > limits.max_te_gpus:
            return Violation(
                "max_te_gpus", limits.max_te_gpus, held.te_gpus, extra, scope.label,
                f"{scope.label} holds {held.te_gpus} of {limits.max_te_gpus} TE GPUs; {needs}",
            )
        found = _budget_violation(scope)
        if found:
            return found
    return None


def blocking_reason(job: JobLike, usage: UsageSnapshot, gpus: int | None = None) -> tuple[str, str] | None:
    """``("QuotaExceeded", message)`` if a quota keeps ``job`` from starting on ``gpus`` GPUs
    (default ``asked_gpus(job)``) now, else None.

    The scheduling loop calls this for each pending job with the snapshot from
    ``scheduler.selectors.quota_usage()`` and calls ``usage.charge(job, gpus)`` for
    every job it starts in the same cycle, so later jobs see those GPUs.
    """
    found = scheduling_violation(job, usage, gpus)
    return (found.reason, found.message) if found else None

"""Reads of scheduler data: job lists visible to a user, quota usage, cluster capacity.

Views and API call these instead of building querysets themselves, so the
visibility rule (owners see their jobs, staff see every job) lives in one place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db.models import Count, F, FilteredRelation, Max, OuterRef, Prefetch, Q, QuerySet, Subquery, Sum
from django.utils import timezone

from cluster.models import Node
from scheduler.images import Image
from scheduler.models import ACTIVE_STATES, Attempt, Job, JobClassChoice, JobEvent, JobState, Quota
from scheduler.quotas import DEFAULT_BUDGET_PERIOD_DAYS, Limits, Scope, Usage, UsageSnapshot, held_gpus

User = get_user_model()


# --- Jobs -----------------------------------------------------------------


def visible_jobs(user) -> QuerySet[Job]:  # noqa: ANN001 - a user model instance
    """Jobs ``user`` may see: their own, or all of them for staff."""
    jobs = Job.objects.select_related("owner", "image", "project")
    if user.is_staff:
        return jobs
    return jobs.filter(owner=user)


def filter_jobs(
    jobs: QuerySet[Job], *, state: str | Collection[str] | None = None, job_class: str | None = None,
    owner: str | None = None, arrays: str | None = None, array_id: int | None = None,
    active_from: datetime | None = None, active_to: datetime | None = None,
) -> QuerySet[Job]:
    """Narrow a job queryset; callers validate the values first (see ``JOB_FILTERS``). ``state``: one
    state, or several (jobs in any of them). ``arrays="collapsed"``: an array is one row, its first
    task's, annotated with ``array_tasks`` (how many tasks it has). ``array_id``: the tasks of that array.
    ``active_from`` / ``active_to``: the jobs that existed and had not ended at some moment between them
    (submitted before ``active_to``, not ended before ``active_from``), as Slurm's ``sacct -S -E`` selects."""
    if arrays == "collapsed":
        tasks = Job.objects.filter(array_id=OuterRef("pk")).order_by().values("array_id").annotate(n=Count("pk"))
        jobs = jobs.filter(Q(array_id__isnull=True) | Q(array_id=F("pk"))).annotate(
            array_tasks=Subquery(tasks.values("n")))
    if isinstance(state, str):
        jobs = jobs.filter(state=state)
    elif state:
        jobs = jobs.filter(state__in=list(state))
    if job_class:
        jobs = jobs.filter(job_class=job_class)
    if owner:
        jobs = jobs.filter(owner__username=owner)
    if array_id is not None:
        jobs = jobs.filter(array_id=array_id)
    if active_to is not None:
        jobs = jobs.filter(submitted_at__lt=active_to)
    if active_from is not None:
        jobs = jobs.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=active_from))
    return jobs


#: Accepted values of the list filters.
JOB_FILTERS = {"state": set(JobState.values), "job_class": set(JobClassChoice.values)}


def job_with_history(user, job_id: int) -> Job | None:  # noqa: ANN001
    """One visible job with attempts and events prefetched, or None (unknown or not visible)."""
    return (
        visible_jobs(user)
        .prefetch_related(
            Prefetch("attempts", queryset=Attempt.objects.order_by("number")),
            Prefetch("events", queryset=JobEvent.objects.order_by("at", "id")),
        )
        .filter(pk=job_id)
        .first()
    )


# --- Cluster capacity -----------------------------------------------------


def events_of(job_ids: Collection[int]) -> dict[int, list[dict]]:
    """Each of these jobs' events in order (``reason`` and ``message``), in one query."""
    events: dict[int, list[dict]] = defaultdict(list)
    for row in JobEvent.objects.filter(job_id__in=list(job_ids)).order_by("job_id", "at", "id").values(
            "job_id", "reason", "message"):
        events[row["job_id"]].append(row)
    return events


@dataclass(frozen=True, slots=True)
class Capacity:
    """GPU capacity of the registered nodes (all states: a node that is down may return); with
    ``node_shapes`` (``request_capacity.NodeShape``), each kind of node and how many, when asked for."""

    nodes: int
    largest_node_gpus: int
    total_gpus: int
    node_shapes: tuple[tuple[int, float, float, int], ...] = ()


def cluster_capacity(shapes: bool = False) -> Capacity:
    """The registered nodes' capacity in one query; ``shapes``: with ``node_shapes`` (grouped by GPUs, CPUs and
    memory: few rows where nodes are alike), for a request that asks for CPUs or memory."""
    if not shapes:
        agg = Node.objects.aggregate(n=Count("id"), largest=Max("gpus"), total=Sum("gpus"))
        return Capacity(agg["n"] or 0, agg["largest"] or 0, agg["total"] or 0)
    rows = tuple(Node.objects.order_by().values_list("gpus", "cpus", "mem_gb").annotate(n=Count("id")))
    return Capacity(sum(r[3] for r in rows), max((r[0] for r in rows), default=0), sum(r[0] * r[3] for r in rows), rows)


# --- Quota usage ----------------------------------------------------------


def quota_usage(*, user_ids: Iterable[int] | None = None, now: datetime | None = None) -> UsageSnapshot:
    """Usage against every quota, in five queries whatever the number of users
    (held GPUs as ``_held_and_pending`` counts them).

    With ``user_ids`` the snapshot covers those users (their ``own`` usage is
    always present) and the full membership of their groups; without, it covers
    every user bound by a quota. Callers that need several users' answers make
    one call and reuse the snapshot.
    """
    now = now or timezone.now()
    quotas = list(Quota.objects.select_related("user", "group"))
    user_quota = {q.user_id: q for q in quotas if q.user_id is not None}
    group_quota = {q.group_id: q for q in quotas if q.group_id is not None}

    groups_of: dict[int, list[int]] = defaultdict(list)
    members: dict[int, set[int]] = defaultdict(set)
    memberships = User.groups.through.objects.filter(group_id__in=group_quota).values_list("user_id", "group_id")
    for uid, gid in memberships:
        groups_of[uid].append(gid)
        members[gid].add(uid)

    if user_ids is None:
        subjects = set(user_quota) | set(groups_of)
    else:
        subjects = set(user_ids)
    relevant_groups = {gid for uid in subjects for gid in groups_of.get(uid, ())}
    relevant = set(subjects)
    for gid in relevant_groups:
        relevant |= members[gid]

    own = _held_and_pending(relevant)
    own_period = {
        uid: user_quota[uid].budget_period_days if uid in user_quota else DEFAULT_BUDGET_PERIOD_DAYS for uid in relevant
    }
    periods = set(own_period.values()) | {group_quota[g].budget_period_days for g in relevant_groups}
    gpu_hours = _gpu_hours(relevant, periods, now)
    for uid in relevant:
        own[uid].gpu_hours = gpu_hours[uid].get(own_period[uid], 0.0)

    if user_ids is None:  # every quota appears, also a group's without members
        relevant_groups = set(group_quota)
    group_scopes: dict[int, Scope] = {}
    for gid in relevant_groups:
        quota = group_quota[gid]
        total = Usage()
        for uid in members[gid]:
            total.gpus += own[uid].gpus
            total.te_gpus += own[uid].te_gpus
            total.pending_jobs += own[uid].pending_jobs
            total.gpu_hours += gpu_hours[uid].get(quota.budget_period_days, 0.0)
        group_scopes[gid] = Scope("group", quota.group.name, Limits.of(quota), total)

    snapshot = UsageSnapshot(own={uid: own[uid] for uid in relevant})
    snapshot.by_quota = {group_quota[gid].pk: scope for gid, scope in group_scopes.items()}
    for uid in subjects:
        scopes: list[Scope] = []
        if uid in user_quota:
            quota = user_quota[uid]
            mine = own[uid]
            scope = Scope("user", quota.user.username, Limits.of(quota),
                          Usage(mine.gpus, mine.te_gpus, mine.gpu_hours, mine.pending_jobs))
            scopes.append(scope)
            snapshot.by_quota[quota.pk] = scope
        scopes.extend(group_scopes[gid] for gid in sorted(groups_of.get(uid, ())))
        snapshot.scopes[uid] = scopes
    return snapshot


def _held_and_pending(user_ids: set[int]) -> dict[int, Usage]:
    """GPUs held (all and TE) and pending job count per user, two queries.

    Held GPUs are those of each active job's current attempt
    (``quotas.held_gpus``), read with the job in one join: a reconfigurable job
    may hold more or fewer GPUs than it asked for, so its ``num_gpus`` is not
    what it holds. A job checkpointing toward a larger reconfiguration target
    counts the target. One row per active job: their number is bounded by the
    cluster's GPUs, while pending jobs, which may be many, are only counted.
    """
    usage = {uid: Usage() for uid in user_ids}
    if not user_ids:
        return usage
    active = (
        Job.objects.filter(owner_id__in=user_ids, state__in=ACTIVE_STATES)
        .annotate(current=FilteredRelation("attempts", condition=Q(attempts__number=F("attempt_count"))))
        .values_list("owner_id", "job_class", "state", "num_gpus", "target_gpus", "current__gpu_allocation",
                     "current__id")
    )
    for owner_id, job_class, state, num_gpus, target, allocation, attempt_id in active:
        growing_to = target if state == JobState.PREEMPTING else 0  # a shrink's target is smaller: no effect
        gpus = held_gpus(num_gpus, (allocation or {}) if attempt_id is not None else None, growing_to=growing_to)
        mine = usage[owner_id]
        mine.gpus += gpus
        if job_class == JobClassChoice.TE:
            mine.te_gpus += gpus
    pending = (
        Job.objects.filter(owner_id__in=user_ids, state=JobState.PENDING)
        .values("owner_id").annotate(n=Count("id")).order_by()
    )
    for row in pending:
        usage[row["owner_id"]].pending_jobs = row["n"]
    return usage


def _gpu_hours(user_ids: set[int], periods: set[int], now: datetime) -> dict[int, dict[int, float]]:
    """GPU-hours per user for each rolling period (days) ending at ``now``, one query; each
    attempt counts the GPUs of its allocation (a reconfigured job's attempts differ)."""
    result: dict[int, dict[int, float]] = defaultdict(dict)
    if not user_ids or not periods:
        return result
    starts = {days: now - timedelta(days=days) for days in periods}
    earliest = min(starts.values())
    rows = (
        Attempt.objects.filter(job__owner_id__in=user_ids, started_at__lt=now)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=earliest))
        .values_list("job__owner_id", "job__num_gpus", "gpu_allocation", "started_at", "ended_at")
    )
    for owner_id, num_gpus, allocation, started, ended in rows:
        gpus = held_gpus(num_gpus, allocation or None)
        end = min(ended or now, now)
        per_user = result[owner_id]
        for days, window_start in starts.items():
            seconds = (end - max(started, window_start)).total_seconds()
            if seconds > 0:
                per_user[days] = per_user.get(days, 0.0) + gpus * seconds / 3600.0
    return result


def effective_limits(scopes: list[Scope]) -> tuple[dict[str, int | float | None], dict[str, int | float | None]]:
    """The tightest limit of each kind over ``scopes``, and the usage it is measured against.

    Both dicts are keyed by limit name. For a limit set by several scopes the
    one with the least headroom wins and its usage is reported (a group's usage
    is its members' total). Per-job limits (TE size and runtime) have no usage
    (None); so has a limit no scope sets.
    """
    limits: dict[str, int | float | None] = {name: None for name in Limits().as_dict()}
    usage: dict[str, int | float | None] = {name: None for name in USAGE_OF}
    for limit_name, usage_name in USAGE_OF.items():
        best: Scope | None = None
        best_headroom = 0.0
        for scope in scopes:
            value = getattr(scope.limits, limit_name)
            if value is None:
                continue
            headroom = value - getattr(scope.usage, usage_name)
            if best is None or headroom < best_headroom:
                best, best_headroom = scope, headroom
        if best is not None:
            limits[limit_name] = getattr(best.limits, limit_name)
            used = getattr(best.usage, usage_name)
            usage[limit_name] = round(used, 3) if isinstance(used, float) else used
    budget_scope = [s for s in scopes if s.limits.gpu_hours_budget is not None]
    limits["budget_period_days"] = (
        min(budget_scope, key=lambda s: s.limits.gpu_hours_budget - s.usage.gpu_hours).limits.budget_period_days
        if budget_scope else None
    )
    for limit_name in ("max_te_job_gpus", "max_te_runtime"):
        values = [getattr(s.limits, limit_name) for s in scopes if getattr(s.limits, limit_name) is not None]
        limits[limit_name] = min(values) if values else None
    return limits, usage


#: Limits measured against a running total, and the ``Usage`` attribute they read.
USAGE_OF = {
    "max_gpus": "gpus",
    "max_te_gpus": "te_gpus",
    "gpu_hours_budget": "gpu_hours",
    "max_pending_jobs": "pending_jobs",
}


def quota_report(user) -> dict:  # noqa: ANN001
    """The caller's effective limits, the usage beside each, own usage and every binding scope.

    The body of GET /api/v1/quota/; ``usage[name]`` is what ``limits[name]`` is
    compared with, as in the 403 body's ``current_usage``.
    """
    snapshot = quota_usage(user_ids=[user.pk])
    scopes = snapshot.scopes_for(user.pk)
    limits, usage = effective_limits(scopes)
    own = snapshot.own[user.pk]
    for limit_name, usage_name in USAGE_OF.items():
        if usage[limit_name] is None:
            used = getattr(own, usage_name)
            usage[limit_name] = round(used, 3) if isinstance(used, float) else used
    return {
        "limits": limits,
        "usage": usage,
        "own_usage": own.as_dict(),
        "scopes": [
            {"scope": s.kind, "name": s.name, "limits": s.limits.as_dict(), "usage": s.usage.as_dict()} for s in scopes
        ],
    }


def enabled_image_names() -> list[str]:
    """Names of the images a job may name now (scheduler.images), sorted."""
    return list(Image.objects.filter(enabled=True).order_by("name").values_list("name", flat=True))


def enabled_images() -> list[dict]:
    """The images a job may name now: ``[{name, digest, note}]``, sorted by name (``uri`` is the
    storage layout, for the nodes only)."""
    return list(Image.objects.filter(enabled=True).order_by("name").values("name", "digest", "note"))

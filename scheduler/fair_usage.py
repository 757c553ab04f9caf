"""Live fair share: every tenant's share and decayed usage, read from the database.

The tenants of the live cluster are its projects (``scheduler.projects``); a
job charged to no project belongs to the tenant ``""``, with the default
share. A job's user is its owner's id, as ``scheduler.snapshot`` writes it in
``JobSpec.user``.

Usage is the one ``scheduler.core.fairshare`` defines: GPU-seconds, each
decayed by half every ``half_life`` seconds. The simulator accrues it
step by step (``UsageLedger``); here it is the same integral computed from
the attempts at once: an attempt that held ``g`` GPUs from ``s`` to ``e``
(``now`` while it still runs) adds ``g * h/ln 2 * (2^(-(now-e)/h) -
2^(-(now-s)/h))``. Attempts that ended more than ``HORIZON_HALF_LIVES``
half-lives ago weigh less than a millionth and are not read, so one cycle
reads a bounded window of attempts whatever the history's length. On
PostgreSQL the window is summed in the database (one row per project and
user comes back); on other databases here, in Python.

Fair share is on when ``SCHEDULER_FAIR_SHARE`` is true; the policies then
order the BE queue by it and reclaim GPUs from borrowing tenants
(docs/policies.md, "Fair share on the live cluster").
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from scheduler.core.fairshare import DEFAULT_SHARE, TenantUsage
from scheduler.gpu_allocation import gpu_count
from scheduler.models import Attempt, Job
from scheduler.projects import Project

#: Attempts that ended this many half-lives ago or more are left out (weight below 2^-20).
HORIZON_HALF_LIVES = 20


def enabled() -> bool:
    """True when the live loop schedules with fair share (``SCHEDULER_FAIR_SHARE``)."""
    return bool(getattr(settings, "SCHEDULER_FAIR_SHARE", False))


def half_life() -> float:
    """Seconds after which usage counts half (``SCHEDULER_FAIR_SHARE_HALF_LIFE``)."""
    return float(settings.SCHEDULER_FAIR_SHARE_HALF_LIFE)


def tenants_now() -> dict[str, TenantUsage] | None:
    """The tenants as the next cycle will see them, or None while fair share is off (for the
    priority factors shown on the job page and in the API)."""
    return tenant_usage(timezone.now()) if enabled() else None


def decayed_gpu_seconds(gpus: float, start: float, end: float, now: float, half: float) -> float:
    """GPU-seconds of ``gpus`` GPUs held from ``start`` to ``end`` (epoch seconds), decayed to ``now``."""
    if end <= start or gpus <= 0:
        return 0.0
    return gpus * (half / math.log(2.0)) * (2.0 ** (-(now - end) / half) - 2.0 ** (-(now - start) / half))


def tenant_usage(now: datetime, half: float | None = None) -> dict[str, TenantUsage]:
    """Every project (with its share) and every tenant with usage, as of ``now`` (two queries)."""
    half = half_life() if half is None else half
    usage: dict[str, float] = {}
    users: dict[str, dict[str, float]] = {}
    projects = {pk: (name, share) for pk, name, share in Project.objects.values_list("id", "name", "share")}
    sums = _sql_sums(now, half) if connection.vendor == "postgresql" else _python_sums(now, half)
    for (project, owner), used in sums.items():
        if used <= 0:
            continue
        tenant = projects[project][0] if project in projects else ""
        usage[tenant] = usage.get(tenant, 0.0) + used
        per_user = users.setdefault(tenant, {})
        per_user[str(owner)] = per_user.get(str(owner), 0.0) + used
    shares = dict(projects.values())
    return {
        name: TenantUsage(float(shares.get(name, DEFAULT_SHARE)), usage.get(name, 0.0), users.get(name, {}))
        for name in set(shares) | set(usage)
    }


def _window(now: datetime, half: float) -> Q:
    """The attempts whose usage counts at ``now``: started before it, not ended before the horizon."""
    horizon = now - timedelta(seconds=HORIZON_HALF_LIVES * half)
    return Q(started_at__lt=now) & (Q(ended_at__isnull=True) | Q(ended_at__gt=horizon))


def _python_sums(now: datetime, half: float) -> dict[tuple[int | None, int], float]:
    """Decayed GPU-seconds per (project id, owner id), summed here from every attempt of the window."""
    t_now = now.timestamp()
    sums: dict[tuple[int | None, int], float] = {}
    rows = (Attempt.objects.filter(_window(now, half))
            .values_list("job__project_id", "job__owner_id", "gpu_allocation", "started_at", "ended_at").order_by())
    for project, owner, allocation, started, ended in rows:
        gpus = gpu_count(allocation)
        end = min(ended.timestamp(), t_now) if ended is not None else t_now
        used = decayed_gpu_seconds(gpus, started.timestamp(), end, t_now, half)
        if used > 0:
            sums[(project, owner)] = sums.get((project, owner), 0.0) + used
    return sums


#: ``_python_sums`` as one PostgreSQL aggregate: the window's attempts are summed where they are
#: instead of sent over (at 5,000 nodes, 60,000 rows with their allocations: 0.9 s of a cycle).
#: ``{gpus}``: each attempt's GPU count from its allocation (``{node: [indices]}``).
_SQL = """
SELECT j.project_id, j.owner_id,
       SUM(g.n * (power(2.0, -(%(now)s - LEAST(COALESCE(EXTRACT(EPOCH FROM a.ended_at)::float8, %(now)s), %(now)s))
                          / %(half)s)
                  - power(2.0, -(%(now)s - EXTRACT(EPOCH FROM a.started_at)::float8) / %(half)s)))
FROM {attempt} a
JOIN {job} j ON j.id = a.job_id
CROSS JOIN LATERAL (
    SELECT COALESCE(SUM(CASE WHEN jsonb_typeof(e.value) = 'array' THEN jsonb_array_length(e.value) ELSE 0 END), 0) AS n
    FROM jsonb_each(CASE WHEN jsonb_typeof(a.gpu_allocation) = 'object' THEN a.gpu_allocation ELSE '{{}}'::jsonb END) e
) g
WHERE a.started_at < %(at)s AND (a.ended_at IS NULL OR a.ended_at > %(horizon)s) AND g.n > 0
  AND LEAST(COALESCE(EXTRACT(EPOCH FROM a.ended_at)::float8, %(now)s), %(now)s) > EXTRACT(EPOCH FROM a.started_at)::float8
GROUP BY j.project_id, j.owner_id
"""


def _sql_sums(now: datetime, half: float) -> dict[tuple[int | None, int], float]:
    """``_python_sums`` computed by PostgreSQL (the same integral, summed in the database)."""
    sql = _SQL.format(attempt=connection.ops.quote_name(Attempt._meta.db_table),
                      job=connection.ops.quote_name(Job._meta.db_table))
    params = {"now": now.timestamp(), "half": float(half), "at": now,
              "horizon": now - timedelta(seconds=HORIZON_HALF_LIVES * half)}
    scale = half / math.log(2.0)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {(project, owner): float(total) * scale for project, owner, total in cursor.fetchall()}

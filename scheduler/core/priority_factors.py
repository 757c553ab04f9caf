"""Why a pending job is where it is in the queue: its priority factors, in
the order the queue policies apply them (as Slurm's ``sprio`` shows them).

1. ``class``: TE jobs are considered before BE jobs (every policy but
   ``fifo``, which has one queue);
2. ``fair_share``: with fair share on, the tenant's factor ``2^(-U/S)``
   (docs/policies.md; 1 = used nothing, 0.5 = at its share) orders tenants
   in the BE queue; None when fair share is off;
3. ``priority``: the requested priority, higher first, within a class (and
   tenant);
4. ``age_seconds``: time since submission: earlier first among equals, and
   the oldest job gets the starvation reservation, whatever its priority.

The other policies put their own keys first (Tiresias attained service,
Rubick its admission groups and expected work) and use ``priority`` after
them; a job's queue position always follows the configured policy's own
order (``scheduler.core.policy.queue_order``).
"""

from __future__ import annotations

from typing import Mapping

from scheduler.core.fairshare import TenantUsage, factors
from scheduler.core.model import JobClass


def priority_factors(job_class: str, priority: int, submitted: float, now: float, tenant: str = "",
                     tenants: Mapping[str, TenantUsage] | None = None) -> dict[str, object]:
    """The factors of one pending job at ``now`` (times in seconds on one clock)."""
    fair = None
    if tenants is not None:
        fair = factors({**{tenant: TenantUsage()}, **tenants}).get(tenant)
    return {
        "class": job_class,
        "class_first": job_class == JobClass.TE.value,
        "fair_share": fair,
        "priority": priority,
        "age_seconds": max(0.0, now - submitted),
    }

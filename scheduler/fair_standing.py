"""Each project's fair-share standing now, as the scheduler weighs it (reads only).

What Slurm's ``sshare`` answers: is my project getting its share? For each
tenant (a project, or ``(none)`` for jobs charged to no project):

* **share** as configured, and normalized over every tenant;
* **usage**: GPU-hours, each weighted by ``2^(-age/half-life)`` (``SCHEDULER_FAIR_SHARE_HALF_LIFE``:
  a GPU-hour used one half-life ago counts half), normalized over every tenant, and the viewer's
  own part of it;
* **fair-share factor** ``2^(-usage/share)`` on normalized values (``scheduler.core.fairshare``):
  a higher factor goes first;
* **held**, **wanted** and **entitled** GPUs: what the tenant's jobs hold now; what it holds and
  is not giving back plus what its pending jobs that are not held back ask for; and its max-min
  fair part of the cluster's GPUs given what every tenant wants and the shares, the part fair
  share aims for (``scheduler.core.fair_queue.standing``, the function the policies use).

Pending jobs held back (quota, dependency, array limit, image, a person's hold) are known by the pending reason
the last scheduling cycle wrote. With fair share off (``SCHEDULER_FAIR_SHARE``) the same figures
say how the scheduler would weigh the tenants; ``enabled`` says so.

Who sees what: staff see every tenant; any other user the projects they belong to, and
``(none)`` when they belong to none. The cluster's total GPUs are shown to everyone.

The figures do not depend on the viewer, so one computation serves every viewer for
``FAIR_STANDING_CACHE_SECONDS`` (default 10; kept in Redis; ``computed_at`` says when it was
made): at 5,000 nodes with 50,000 jobs waiting and a day of history it takes about a third of a
second (docs/results.md), which a page view or a script polling ``gpusched share`` need not
repeat each time.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from datetime import datetime

import redis
from django.conf import settings
from django.db.models import F, Sum
from django.utils import timezone

from cluster.models import Node, NodeState
from scheduler import coordination, fair_usage, holds
from scheduler.core.decisions import Reason
from scheduler.core.fair_queue import standing
from scheduler.gpu_allocation import gpu_count
from scheduler.models import ACTIVE_STATES, Attempt, Job, JobState
from scheduler.projects import Membership
from scheduler.usage import NO_PROJECT

log = logging.getLogger(__name__)

CACHE_KEY = "gpusched:scheduler:fair-standing"  # cleared with the stack's runtime keys

#: Pending reasons of jobs held back: they want no GPUs until the hold ends (``scheduler.snapshot``).
HELD_BACK = frozenset({Reason.QUOTA_EXCEEDED.value, Reason.DEPENDENCY.value, Reason.JOB_ARRAY_TASK_LIMIT.value,
                       Reason.IMAGE_UNAVAILABLE.value}) | holds.BY_PERSON
#: Job states whose GPUs are being given back: held, but not wanted.
GIVING_BACK = frozenset({JobState.PREEMPTING, JobState.CANCELLING})


def held_and_wanted() -> tuple[dict[str, float], dict[str, float]]:
    """GPUs each tenant holds, and wants (module doc), by tenant name (``""``: no project); a job's
    GPUs are those of its current attempt, as a cycle's snapshot reads them."""
    held: dict[str, float] = defaultdict(float)
    wanted: dict[str, float] = defaultdict(float)
    open_attempts = (Attempt.objects.filter(job__state__in=ACTIVE_STATES, number=F("job__attempt_count"))
                     .values_list("job__project__name", "job__state", "gpu_allocation").order_by())
    for project, state, allocation in open_attempts:
        gpus = gpu_count(allocation)
        held[project or ""] += gpus
        if state not in GIVING_BACK:
            wanted[project or ""] += gpus
    pending = (Job.objects.filter(state=JobState.PENDING).exclude(pending_reason__in=HELD_BACK)
               .values_list("project__name").annotate(gpus=Sum("num_gpus")).order_by())
    for project, gpus in pending:
        wanted[project or ""] += gpus or 0
    return dict(held), dict(wanted)


def report(viewer, now: datetime | None = None) -> dict:  # noqa: ANN001 - a user model instance
    """The standing as ``viewer`` may see it (module doc): ``enabled``, ``half_life_s``,
    ``total_gpus``, ``computed_at`` and one row per visible tenant, most entitled first. The
    figures are shared by every viewer for ``FAIR_STANDING_CACHE_SECONDS`` (module doc)."""
    figures = _cached_figures(now)
    visible = _visible(viewer, figures["tenants"])
    me = str(viewer.pk)
    rows = [{
        "project": name or NO_PROJECT,
        **{k: v for k, v in row.items() if k != "users"},
        "your_usage_gpu_hours": row["users"].get(me, 0.0),
    } for name, row in figures["tenants"].items() if name in visible]
    rows.sort(key=lambda r: (-r["entitled_gpus"], -r["fair_share_factor"], r["project"]))
    return {**{k: v for k, v in figures.items() if k != "tenants"}, "rows": rows}


def figures(now: datetime) -> dict:
    """Every tenant's standing at ``now``, for every viewer alike (JSON-ready; ``tenants`` keyed by
    tenant name, each with the decayed usage of its users by user id)."""
    half = fair_usage.half_life()
    total = Node.objects.filter(state=NodeState.UP).aggregate(n=Sum("gpus"))["n"] or 0
    held, wanted = held_and_wanted()
    tenants, factor, entitled = standing(total, held, wanted, fair_usage.tenant_usage(now, half))
    shares = sum(u.share for u in tenants.values()) or 1.0
    usage = sum(u.usage for u in tenants.values())
    return {
        "enabled": fair_usage.enabled(), "half_life_s": half, "total_gpus": total,
        "computed_at": now.isoformat().replace("+00:00", "Z"),
        "tenants": {name: {
            "share": u.share,
            "share_norm": u.share / shares,
            "usage_gpu_hours": u.usage / 3600,
            "usage_norm": u.usage / usage if usage > 0 else 0.0,
            "users": {user: used / 3600 for user, used in u.users.items()},
            "fair_share_factor": factor[name],
            "held_gpus": held.get(name, 0.0),
            "wanted_gpus": wanted.get(name, 0.0),
            "entitled_gpus": entitled.get(name, 0.0),
        } for name, u in tenants.items()},
    }


def _cached_figures(now: datetime | None) -> dict:
    """``figures`` as computed at most ``FAIR_STANDING_CACHE_SECONDS`` ago (``now`` given: computed for it, and
    not cached); computed afresh while Redis cannot be reached."""
    seconds = int(settings.FAIR_STANDING_CACHE_SECONDS)
    if now is not None or seconds <= 0:
        return figures(now or timezone.now())
    client = coordination.redis_client()
    try:
        raw = client.get(CACHE_KEY)
    except redis.RedisError as exc:
        log.warning("fair-share standing computed without its cache: %s", exc)
        return figures(timezone.now())
    if raw is not None:
        return json.loads(raw)
    fresh = figures(timezone.now())
    try:
        client.set(CACHE_KEY, json.dumps(fresh, separators=(",", ":")), ex=seconds)
    except redis.RedisError as exc:
        log.warning("fair-share standing not cached: %s", exc)
    return fresh


def _member_of(viewer) -> set[str]:  # noqa: ANN001
    return set(Membership.objects.filter(user_id=viewer.pk).values_list("project__name", flat=True))


def _visible(viewer, tenants: dict) -> set[str]:  # noqa: ANN001
    """Tenant names the viewer may see (module doc)."""
    if viewer.is_staff:
        return set(tenants)
    mine = _member_of(viewer)
    return mine if mine else {""}

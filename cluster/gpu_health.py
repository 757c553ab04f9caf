"""GPU health: a failing GPU is taken out of service, its job requeued; an admin returns it.

A GPU is marked unhealthy (``Gpu.healthy = False`` with the reason) when its
telemetry reports a new uncorrectable ECC error or an Xid of the site's list
(``GpuPolicy.unhealthy_xids``), or when ``GpuPolicy.launch_failure_limit``
launches in a row failed on it. From then on the scheduling loop offers it to
no job (the snapshot's free map and the GPU claim of a start skip it). The job
running on it, if any, is requeued, not failed: it is moved to PREEMPTING with
the reason ``GpuUnhealthy`` and told to stop within its grace period, and its
exit then settles as a preemption (PENDING, to restart elsewhere, from its
checkpoint if it wrote one), the existing requeue path of ``cluster.settlement``.
``return_to_service`` (the admin's action, ``manage.py gpu_health return``)
clears the mark and asks for a scheduling cycle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.db.models import F

from cluster import commands
from cluster.models import Gpu, GpuPolicy
from cluster.telemetry_schema import GpuSample
from scheduler import transitions, triggers
from scheduler.models import Attempt, Job, JobState

log = logging.getLogger(__name__)

#: Why the loop stopped a job on an unhealthy GPU (its JobEvent's reason).
REASON_UNHEALTHY = "GpuUnhealthy"
#: Seconds an in-process copy of the policy is used before it is read again.
POLICY_TTL_S = 10.0
_cached: tuple[float, GpuPolicy] | None = None


def policy(fresh: bool = False) -> GpuPolicy:
    """The site's GPU policy (row 1, created with the defaults), cached for ``POLICY_TTL_S``."""
    global _cached
    now = time.monotonic()
    if fresh or _cached is None or now - _cached[0] > POLICY_TTL_S:
        _cached = (now, GpuPolicy.objects.get_or_create(pk=1)[0])
    return _cached[1]


def failures_in(gpus: Iterable[GpuSample], xids: frozenset[int]) -> dict[int, str]:
    """GPU index -> reason, for the GPUs of one telemetry report that show a failure."""
    found = {}
    for g in gpus:
        bad = [x for x in g.xids if x in xids]
        if g.ecc_dbe_new:
            found[g.index] = f"{g.ecc_dbe_new} new uncorrectable ECC error(s) (volatile total {g.ecc_dbe})"
        elif bad:
            found[g.index] = f"Xid {bad[-1]}"
    return found


def check_telemetry(node: str, gpus: Iterable[GpuSample], now: datetime) -> list[int]:
    """Mark the GPUs of ``node`` whose report shows a failure; returns the indices newly marked.
    Costs nothing but a loop when no GPU reports an ECC error or an Xid (the usual case)."""
    gpus = [g for g in gpus if g.ecc_dbe_new or g.xids]
    if not gpus:
        return []
    return [i for i, why in sorted(failures_in(gpus, policy().xids()).items()) if mark_unhealthy(node, i, why, now)]


def mark_unhealthy(node: str, index: int, reason: str, now: datetime) -> bool:
    """Take GPU ``node:index`` out of service with ``reason`` and requeue the job on it.

    False when there is no such GPU or it is already unhealthy (the first reason is kept).
    """
    with transaction.atomic():
        gpu = Gpu.objects.select_for_update().filter(node__name=node, index=index, healthy=True).first()
        if gpu is None:
            return False
        gpu.healthy, gpu.unhealthy_reason, gpu.unhealthy_since = False, reason[:200], now
        gpu.save(update_fields=["healthy", "unhealthy_reason", "unhealthy_since"])
        if gpu.allocated_to_id is not None:
            requeue(gpu.allocated_to_id, f"GPU {node}:{index} is unhealthy ({reason}); requeued", now)
        announce_cluster()
    log.warning("GPU %s:%d marked unhealthy: %s", node, index, reason)
    return True


def announce_cluster() -> None:
    from scheduler import announce

    announce.cluster_changed()


def requeue(job_id: int, message: str, now: datetime) -> bool:
    """Stop the job's current attempt within its grace period so that it settles back to PENDING.

    Only a STARTING or RUNNING job is stopped (one already stopping goes its way).
    """
    job = Job.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.state not in (JobState.STARTING, JobState.RUNNING):
        return False
    att = Attempt.objects.filter(job=job, number=job.attempt_count).first()
    if att is None:
        return False
    transitions.move_locked(job, JobState.PREEMPTING, REASON_UNHEALTHY, message[:500],
                            preemption_count=F("preemption_count") + 1)
    Attempt.objects.filter(pk=att.pk, notice_at__isnull=True).update(notice_at=now)
    grace = float(job.grace_period)
    commands.on_commit([lambda node=node: commands.preempt(node, job.pk, att.number, grace)
                        for node in sorted(att.gpu_allocation or {})])
    return True


def return_to_service(node: str, index: int) -> bool:
    """Clear the unhealthy mark of ``node:index`` (and its launch failures); a cycle follows.
    False when there is no such GPU or it was healthy."""
    with transaction.atomic():
        changed = Gpu.objects.filter(node__name=node, index=index, healthy=False).update(
            healthy=True, unhealthy_reason="", unhealthy_since=None, launch_failures=0)
        if changed:
            transaction.on_commit(triggers.request_scheduling)
            transaction.on_commit(announce_cluster)
    if changed:
        log.info("GPU %s:%d returned to service", node, index)
    return bool(changed)


def launch_failed(node: str, indices: Iterable[int], now: datetime) -> list[int]:
    """Count a failed launch on these GPUs; those reaching the policy's limit are marked unhealthy."""
    indices = list(indices)
    Gpu.objects.filter(node__name=node, index__in=indices).update(launch_failures=F("launch_failures") + 1)
    limit = policy().launch_failure_limit
    if not limit:
        return []
    reached = Gpu.objects.filter(node__name=node, index__in=indices, launch_failures__gte=limit, healthy=True)
    return [i for i in sorted(reached.values_list("index", flat=True))
            if mark_unhealthy(node, i, f"{limit} launch failures in a row", now)]


def launch_succeeded(node: str, indices: Iterable[int]) -> None:
    """A launch worked on these GPUs: their run of failures is over."""
    Gpu.objects.filter(node__name=node, index__in=list(indices), launch_failures__gt=0).update(launch_failures=0)

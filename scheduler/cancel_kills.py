"""Stopping the processes of cancelled jobs: the kills a scheduling cycle sends for CANCELLING jobs."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import F

from cluster import commands
from cluster.protocol import EXIT_CANCEL
from scheduler import row_locks
from scheduler.applied import Applied, guarded
from scheduler.models import Attempt, JobState


def request_cancel_kills(now: datetime) -> list[int]:
    """Stop the processes of CANCELLING jobs not yet told to stop (AGENT_KILL on commit).

    The cancel service only moves the job to CANCELLING; this sets the attempt's
    ``notice_at`` (conditionally, so the kill is sent once) and sends SIGTERM,
    then SIGKILL after the job's grace period. The attempts are locked first (in
    job id order) and only those still without a notice are written, so two
    cycles at once send each kill once. Returns the job ids.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("request_cancel_kills must run inside transaction.atomic()")
    out, batch = Applied(), Applied()
    if guarded(out, [], lambda: _cancel_kills(now, batch)):
        return batch.cancel_kills
    return []


def _cancel_kills(now: datetime, out: Applied) -> None:
    attempts, _ = row_locks.locked(  # an attempt held by another transaction waits for a later cycle
        Attempt.objects.filter(job__state=JobState.CANCELLING, number=F("job__attempt_count"), notice_at__isnull=True)
        .order_by("job_id").values_list("pk", "job_id", "number", "gpu_allocation", "job__grace_period"),
        of=("self",), what="cancelled jobs' attempt rows")
    if not attempts:
        return
    Attempt.objects.filter(pk__in=[pk for pk, *_ in attempts]).update(notice_at=now)
    sends = []
    for _, job_id, number, allocation, grace in attempts:
        for node in allocation or {}:
            sends.append(lambda node=node, job_id=job_id, number=number, grace=grace:
                         commands.kill(node, job_id, number, float(grace), EXIT_CANCEL))
        out.cancel_kills.append(job_id)
    commands.on_commit(sends)

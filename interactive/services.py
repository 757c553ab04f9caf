"""Writes for interactive sessions: starting one, storing where its server listens, its last activity."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from interactive.models import SessionEndpoint, SessionKind
from interactive.servers import server_command
from scheduler import announce, coordination, idleness
from scheduler.models import Attempt, Job, JobClassChoice, JobState
from scheduler.services import JobRequest, JobRequestInvalid, submit_job

log = logging.getLogger(__name__)

#: Seconds between two writes of a session's last activity (every proxied request would be too many).
ACTIVITY_RESOLUTION_S = 30
#: A session's grace period: its server gets SIGTERM, then this long to save and stop.
SESSION_GRACE_PERIOD_S = 10


def default_time_limit() -> int:
    """Seconds a session runs when its request names no time limit (``GPUSCHED_SESSION_TIME_LIMIT``)."""
    return int(getattr(settings, "GPUSCHED_SESSION_TIME_LIMIT", 4 * 3600))


def start_session(owner, kind: str, *, num_gpus: int = 1, time_limit: int | None = None,  # noqa: ANN001
                  image: str = "", name: str = "") -> Job:
    """Submit a session of ``kind`` as a TE job of ``owner`` (fast path, TE quotas, confined as any job).

    Raises ``JobRequestInvalid`` (an unknown ``kind`` under ``kind``; the
    rules of every job otherwise) or ``QuotaExceeded``; nothing is written then.
    """
    if kind not in SessionKind.values:
        raise JobRequestInvalid({"kind": [f'"{kind}" is not a session kind; use {" or ".join(SessionKind.values)}.']})
    req = JobRequest(
        name=name or f"{kind} session", command=server_command(kind), job_class=JobClassChoice.TE,
        num_gpus=num_gpus, grace_period=SESSION_GRACE_PERIOD_S,
        time_limit=default_time_limit() if time_limit is None else time_limit, image=image, session_kind=kind,
    )
    return submit_job(owner, req)


def record_endpoint(node: str, job_id: int, attempt: int, host: str, port: int, secret: str, now: datetime) -> bool:
    """Store where the session of ``attempt`` of ``job_id`` listens, as ``node`` reported it.

    Accepted only for a session job whose current, running attempt holds GPUs
    on ``node`` (an agent speaks only for its own jobs); False otherwise, and
    nothing is written. The job page hears of it after commit.
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).exclude(session_kind="").first()
        if job is None or job.attempt_count != attempt or job.state not in (JobState.STARTING, JobState.RUNNING):
            log.warning("session report of job %s attempt %s from %s ignored: not a current session", job_id, attempt, node)
            return False
        allocation = Attempt.objects.filter(job=job, number=attempt).values_list("gpu_allocation", flat=True).first()
        if node not in (allocation or {}):
            log.warning("session report of job %s attempt %s from %s ignored: the attempt runs elsewhere", job_id, attempt, node)
            return False
        SessionEndpoint.objects.update_or_create(
            job=job, defaults={"attempt": attempt, "node": node, "host": host, "port": port, "secret": secret,
                               "ready_at": now, "last_activity_at": None})
        transaction.on_commit(lambda: announce.job_changed(job.pk))
    return True


def touch(job_id: int, now: datetime) -> bool:
    """Note activity through the portal on the session of ``job_id`` (one write per ACTIVITY_RESOLUTION_S).

    Activity also ends the session's idle spell and any idle warning (``scheduler.idleness.forget``), as a
    busy GPU does: idle reclaim must not end a notebook its owner is working in while its GPUs rest (reading,
    writing code, CPU work); the spell starts again from the next idle GPU report."""
    stale = now - timedelta(seconds=ACTIVITY_RESOLUTION_S)
    touched = bool(SessionEndpoint.objects.filter(Q(last_activity_at__isnull=True) | Q(last_activity_at__lt=stale),
                                                  job_id=job_id).update(last_activity_at=now))
    if touched:
        attempt = SessionEndpoint.objects.filter(job_id=job_id).values_list("attempt", flat=True).first()
        if attempt is not None:
            idleness.forget(coordination.redis_client(), job_id, attempt)
    return touched

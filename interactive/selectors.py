"""Reads for interactive sessions: who may reach one (and where it is), and how it is doing.

``target`` is the proxy's only way to a session's address and secret. It
answers None (the portal says 404) for anything but a running session of the
viewer, or of anyone when the viewer is staff and ``GPUSCHED_SESSION_STAFF_ACCESS``
is on; an ended, stopping or restarted session has no target, so its URL
stops answering as soon as the job leaves RUNNING.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import F

from cluster.session_contract import base_url
from interactive.models import SessionEndpoint
from scheduler.models import Job, JobClassChoice, JobState, TERMINAL_STATES


@dataclass(frozen=True)
class Target:
    """Where the portal forwards a session's requests; ``secret`` never leaves the server."""

    job_id: int
    host: str
    port: int
    secret: str
    owner: str
    by_staff: bool  # the viewer is staff reaching another user's session (audited)

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def staff_access() -> bool:
    """Whether staff may open other users' sessions (each opening is audited)."""
    return bool(getattr(settings, "GPUSCHED_SESSION_STAFF_ACCESS", False))


def target(user, job_id: int) -> Target | None:  # noqa: ANN001 - a user model instance (or AnonymousUser)
    """The running session of ``job_id`` if ``user`` may reach it, else None."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    row = (SessionEndpoint.objects.filter(job_id=job_id, job__state=JobState.RUNNING, job__attempt_count=F("attempt"))
           .exclude(job__session_kind="").select_related("job__owner").first())
    if row is None:
        return None
    mine = row.job.owner_id == user.pk
    if not mine and not (user.is_staff and staff_access()):
        return None
    if not row.secret:  # sealed under a key no longer configured (``interactive.sealed``, logged there)
        return None
    return Target(job_id=row.job_id, host=row.host, port=row.port, secret=row.secret,
                  owner=row.job.owner.get_username(), by_staff=not mine)


def status(job: Job, now: datetime) -> dict[str, Any] | None:
    """The life of ``job``'s session for its page and the API (None for a batch job); no secret in it.

    ``phase``: ``queued`` (with ``queue_position`` among waiting TE jobs and the
    pending reason), ``starting`` (the server is not answering yet), ``ready``
    (``url`` opens it), ``stopping``, or ``ended`` (``ended_reason``).
    """
    if not job.session_kind:
        return None
    endpoint = SessionEndpoint.objects.filter(job=job, attempt=job.attempt_count).first()
    info: dict[str, Any] = {"kind": job.session_kind, "url": None, "ready_at": None, "idle_seconds": None,
                            "time_left_seconds": None, "queue_position": None, "pending_reason": "", "ended_reason": ""}
    if job.state in TERMINAL_STATES:
        info.update(phase="ended", ended_reason=ended_reason(job))
    elif job.state in (JobState.PENDING, JobState.NODE_LOST):
        info.update(phase="queued", queue_position=queue_position(job),
                    pending_reason=job.pending_message or job.pending_reason)
    elif job.state in (JobState.PREEMPTING, JobState.CANCELLING):
        info.update(phase="stopping")
    elif job.state == JobState.RUNNING and endpoint is not None:
        url = base_url(job.pk) + ("lab" if job.session_kind == "jupyter" else "terminal/")
        last = endpoint.last_activity_at or endpoint.ready_at
        info.update(phase="ready", url=url, ready_at=endpoint.ready_at.isoformat(),
                    idle_seconds=max(0.0, (now - last).total_seconds()))
    else:
        info.update(phase="starting")
    if job.started_at and job.time_limit and job.state in (JobState.STARTING, JobState.RUNNING):
        info["time_left_seconds"] = max(0.0, job.time_limit - (now - job.started_at).total_seconds())
    return info


def queue_position(job: Job) -> int:
    """1 + the waiting TE jobs submitted before ``job`` (the TE queue is served first come, first served)."""
    return 1 + Job.objects.filter(state=JobState.PENDING, job_class=JobClassChoice.TE,
                                  submitted_at__lt=job.submitted_at).count()


def ended_reason(job: Job) -> str:
    """Why the session ended: its time limit, what stopped it (the event into CANCELLING), or its last event."""
    events = job.events.all()
    if job.state == JobState.CANCELLED:  # the stop's cause: its owner, staff, idle reclaim
        event = (events.filter(to_state=JobState.CANCELLING).order_by("at", "id").first()
                 or events.order_by("-at", "-id").first())
    else:
        event = events.order_by("-at", "-id").first()
    if job.state == JobState.TIMEOUT:
        return "time limit reached"
    if event is not None and event.message:
        return f"{event.reason}: {event.message}" if event.reason else event.message
    if job.exit_code is not None:
        return f"the session's server exited with code {job.exit_code}"
    return job.state.lower()

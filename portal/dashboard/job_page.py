"""Reads behind a job's live page: its state, timeline, attempts with their ledger, and its log.

A job's full state is for its owner and staff only: :func:`job_for` returns
None for anyone else.
"""

from __future__ import annotations

from portal.dashboard.selectors import iso
from scheduler import forecast_store
from scheduler import selectors as job_selectors
from scheduler.attempt_log import log_tail
from scheduler.models import TERMINAL_STATES, Attempt, Job

#: Log lines of an attempt sent when a job page (re)connects.
LOG_TAIL_LINES = 2000


def job_for(user, job_id: int) -> Job | None:  # noqa: ANN001
    """The job if ``user`` may see all of it (owner or staff), else None."""
    return job_selectors.job_with_history(user, job_id)


def job_state(job: Job) -> dict:
    """A job's live page state: state, reason, timeline, attempts with ledger (owner/staff only)."""
    attempts = list(job.attempts.all())
    return {
        "id": job.pk,
        "state": job.state,
        "job_class": job.job_class,
        "pending_reason": job.pending_reason,
        "pending_message": job.pending_message,
        "forecast": _forecast(job),
        "terminal": job.state in TERMINAL_STATES,
        "can_cancel": job.state not in TERMINAL_STATES,
        "attempt_count": job.attempt_count,
        "preemption_count": job.preemption_count,
        "reconfiguration_count": job.reconfiguration_count,
        "first_started_at": iso(job.first_started_at),
        "ended_at": iso(job.ended_at),
        "exit_code": job.exit_code,
        "events": [
            {"at": iso(e.at), "from": e.from_state, "state": e.to_state, "reason": e.reason, "message": e.message}
            for e in job.events.all()
        ],
        "attempts": [
            {
                "number": a.number,
                "allocation": {k: list(v) for k, v in sorted((a.gpu_allocation or {}).items())},
                "state": a.state,
                "started_at": iso(a.started_at),
                "ended_at": iso(a.ended_at),
                "exit_code": a.exit_code,
                "signal": a.signal,
                "notice_at": iso(a.notice_at),
                "vacated_at": iso(a.vacated_at),
                "checkpointed": a.checkpointed,
                "lost_gpu_seconds": a.lost_gpu_seconds,
                "plan": a.plan,
                "gpu_count": a.gpu_count,
                "grad_accum_steps": a.grad_accum_steps,
                "batch_size": a.batch_size,
                "notice_reason": a.notice_reason,
            }
            for a in attempts
        ],
    }


def log_chunks_after(job_id: int, attempt_number: int, after_id: int | None) -> tuple[list[str], int | None, bool]:
    """Log lines of one attempt stored after chunk ``after_id`` (None: from the start).

    Returns ``(lines, last chunk id, truncated)``: at most the last ``LOG_TAIL_LINES`` lines, and
    ``truncated`` says whether earlier ones were left out (from the start, or because more arrived
    since ``after_id`` than a page shows). The last id is ``after_id`` when nothing is new.
    """
    attempt_pk = Attempt.objects.filter(job_id=job_id, number=attempt_number).values_list("pk", flat=True).first()
    if attempt_pk is None:
        return [], after_id, False
    tail = log_tail(attempt_pk, LOG_TAIL_LINES, after_id)
    return tail.lines, tail.last_id, tail.truncated


def _forecast(job: Job) -> dict | None:
    """The pending job's stored start-time forecast and queue position (None: none)."""
    if job.state != "PENDING":
        return None
    stored = forecast_store.read_one(job.pk)
    return stored.as_json() if stored is not None else None

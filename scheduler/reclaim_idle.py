"""Idle reclaim, the writes: warn an idle TE job, then end it (``scheduler.core.idle_reclaim`` decides).

Run by the scheduling loop after the policy's decisions, in the same
transaction, each write conditional on the job being RUNNING with the attempt
the snapshot saw (otherwise skipped: the job moved on meanwhile).

* ``IdleWarn``: a JobEvent (RUNNING -> RUNNING, reason ``IdleWarning``; the
  notifications app's event hook sends the owner's ``idle_warning``), a line
  in the attempt's log, and the warning's time for the next snapshots
  (``scheduler.idleness``). The text says the job will be ended, not resumed.
* ``IdleReclaim``: RUNNING -> CANCELLING (reason ``IDLE_RECLAIMED``), the
  attempt's notice (``notice_reason = idle``), a log line, and after commit a
  kill with the job's grace period to each of its nodes. The exit settles it
  CANCELLED with the reason ``IDLE_RECLAIMED`` (``cluster.settlement``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

from cluster import commands, protocol
from scheduler import coordination, idleness, transitions
from scheduler.core.idle_reclaim import RECLAIMED_REASON, WARNING_REASON, IdleReclaim, IdleWarn
from scheduler.models import Attempt, AttemptLog, Job, JobState, NoticeReason
from scheduler.snapshot import CycleInput

log = logging.getLogger(__name__)

LOG_PREFIX = "[gpusched] "


def apply_idle(actions: list[IdleWarn | IdleReclaim], cycle: CycleInput, now: datetime) -> dict[str, list[int]]:
    """Write the warnings and reclaims; returns the job ids warned and reclaimed."""
    done: dict[str, list[int]] = {"warned": [], "reclaimed": []}
    for action in actions:
        row = cycle.jobs.get(action.job_id)
        if row is None:
            continue
        job = Job.objects.select_for_update().filter(pk=row.pk, state=JobState.RUNNING,
                                                     attempt_count=row.attempt_count).first()
        att = Attempt.objects.filter(job_id=row.pk, number=row.attempt_count).first() if job else None
        if job is None or att is None:
            continue
        AttemptLog.objects.create(attempt=att, received_at=now, text=LOG_PREFIX + action.message)
        if isinstance(action, IdleWarn):
            _warn(job, att, action.message, now)
            done["warned"].append(job.pk)
        else:
            _reclaim(job, att, action.message, now)
            done["reclaimed"].append(job.pk)
    if done["warned"] or done["reclaimed"]:
        log.info("idle reclaim: warned %s, reclaimed %s", done["warned"], done["reclaimed"])
    return done


def _warn(job: Job, att: Attempt, message: str, now: datetime) -> None:
    transitions.record_event(job.pk, at=now, from_state=JobState.RUNNING, to=JobState.RUNNING,
                             reason=WARNING_REASON, message=message)
    stamp, job_id, number = now.timestamp(), job.pk, att.number
    transaction.on_commit(lambda: idleness.mark_warned(coordination.redis_client(), job_id, number, stamp))


def _reclaim(job: Job, att: Attempt, message: str, now: datetime) -> None:
    transitions.move_locked(job, JobState.CANCELLING, RECLAIMED_REASON, message)
    Attempt.objects.filter(pk=att.pk).update(notice_at=now, notice_reason=NoticeReason.IDLE)
    grace, job_id, number = float(job.grace_period), job.pk, att.number
    commands.on_commit([lambda node=node: commands.kill(node, job_id, number, grace, protocol.EXIT_CANCEL)
                        for node in sorted(att.gpu_allocation or {})])

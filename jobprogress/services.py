"""Storing progress reports (the only writer of AttemptProgress)."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from django.db import transaction

from jobprogress.models import MAX_HISTORY_POINTS, AttemptProgress
from scheduler import announce
from scheduler.models import Attempt

log = logging.getLogger(__name__)


def record_progress(job_id: int, attempt: int, report: dict[str, Any], now: datetime, node: str | None = None) -> bool:
    """Store a checked report (``cluster.progress_schema.check_report``) as the attempt's latest progress.

    Fields the report leaves out keep their previous values; metrics are merged
    by name; a point joins the history. False (nothing stored) for an unknown
    attempt, or one that never ran on ``node`` when the report names one (an
    agent reports only its own jobs). The job page hears of it after commit.
    """
    found = Attempt.objects.filter(job_id=job_id, number=attempt).values_list("pk", "gpu_allocation").first()
    if found is None or (node is not None and node not in (found[1] or {})):
        log.warning("progress of job %s attempt %d from node %s dropped: no such attempt there", job_id, attempt, node)
        return False
    with transaction.atomic():
        AttemptProgress.objects.get_or_create(attempt_id=found[0], defaults={"job_id": job_id, "updated_at": now})
        row = AttemptProgress.objects.select_for_update().get(attempt_id=found[0])
        _apply(row, report, now)
        row.save()
        announce.job_progress(job_id)
    return True


def _apply(row: AttemptProgress, report: dict[str, Any], now: datetime) -> None:
    row.updated_at = now
    t = report.get("t")
    if t is not None:
        row.reported_at = datetime.fromtimestamp(t, tz=timezone.utc)
    for name in ("step", "total_steps", "epoch", "checkpoint"):
        if report.get(name) is not None:
            setattr(row, name, report[name])
    metrics = report.get("metrics") or {}
    row.metrics = {**(row.metrics or {}), **metrics}
    if "step" in report or metrics:
        point_t = t if t is not None else now.timestamp()
        row.history = thin([*(row.history or []), [point_t, report.get("step"), metrics]])


def thin(points: list, limit: int = MAX_HISTORY_POINTS) -> list:
    """``points`` if at most ``limit``; else the older half with every other point dropped, the newer half whole."""
    if len(points) <= limit:
        return points
    half = len(points) // 2
    return points[:half:2] + points[half:]

"""Reading progress for the job page, the API and the CLI."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from jobprogress.eta import eta_seconds, step_rate
from jobprogress.models import AttemptProgress


def job_progress(job_id: int) -> dict[str, Any] | None:
    """The progress of the job's newest attempt that reported any, as plain data; None when none did.

    ``{"attempt", "step", "total_steps", "fraction", "epoch", "metrics", "checkpoint",
    "updated_at", "reported_at", "steps_per_second", "eta_seconds",
    "history": {"t": [...], "step": [...], "metrics": {name: [value or null, ...]}}}``.
    The caller checks that the viewer may see the job.
    """
    row = (AttemptProgress.objects.filter(job_id=job_id).select_related("attempt")
           .order_by("-attempt__number").first())
    if row is None:
        return None
    rate = step_rate(row.history)
    fraction = None
    if row.step is not None and row.total_steps:
        fraction = min(1.0, row.step / row.total_steps)
    return {
        "attempt": row.attempt.number,
        "step": row.step,
        "total_steps": row.total_steps,
        "fraction": fraction,
        "epoch": row.epoch,
        "metrics": row.metrics,
        "checkpoint": row.checkpoint,
        "updated_at": row.updated_at.isoformat(),
        "reported_at": row.reported_at.isoformat() if row.reported_at else None,
        "steps_per_second": rate,
        "eta_seconds": eta_seconds(row.step, row.total_steps, rate),
        "history": _columns(row.history),
    }


def running_remaining_seconds(job_ids: Iterable[int], now: datetime) -> dict[int, float]:
    """Seconds of work left for those of ``job_ids`` whose running attempt reports steps and total
    steps with a measurable rate: the ETA of its latest report less the time since that report
    (at least 0). Jobs without such reports are left out; a pending job is always left out (what a
    resumed attempt redoes after its checkpoint is unknown). For start-time forecasts."""
    ids = list(job_ids)
    if not ids:
        return {}
    rows = (AttemptProgress.objects
            .filter(job_id__in=ids, attempt__state="RUNNING", step__isnull=False, total_steps__isnull=False)
            .values_list("job_id", "step", "total_steps", "history", "reported_at", "updated_at"))
    out: dict[int, float] = {}
    for job_id, step, total, history, reported_at, updated_at in rows:
        eta = eta_seconds(step, total, step_rate(history))
        if eta is None:
            continue
        since = (now - (reported_at or updated_at)).total_seconds()
        out[job_id] = max(0.0, eta - max(0.0, since))
    return out


def reported_steps(job_ids: Iterable[int]) -> dict[int, tuple[float, int]]:
    """``(steps done, total steps)`` of those of ``job_ids`` whose newest attempt that reported a total
    did: its latest step while that attempt runs; once it has ended, the step of its latest
    checkpoint (where a resumed attempt starts again; 0 without one). For Rubick's remaining work."""
    ids = list(job_ids)
    if not ids:
        return {}
    rows = (AttemptProgress.objects.filter(job_id__in=ids, total_steps__isnull=False)
            .order_by("job_id", "-attempt__number")
            .values_list("job_id", "attempt__state", "step", "total_steps", "checkpoint"))
    out: dict[int, tuple[float, int]] = {}
    for job_id, state, step, total, checkpoint in rows:
        if job_id in out:
            continue  # an older attempt
        done = step if state == "RUNNING" else _checkpoint_step(checkpoint)
        out[job_id] = (float(min(max(done or 0, 0), total)), int(total))
    return out


def reported_epochs(job_ids: Iterable[int]) -> dict[int, float]:
    """The epoch each of ``job_ids`` has reached: the latest that its newest attempt reporting
    one reported. A checkpoint records no epoch, so a resumed job counts from its last report
    (at most a checkpoint interval ahead of where it resumes). For adaptive jobs' progress
    (``scheduler.adaptive_jobs``), which only steers allocations."""
    ids = list(job_ids)
    if not ids:
        return {}
    rows = (AttemptProgress.objects.filter(job_id__in=ids, epoch__isnull=False)
            .order_by("job_id", "-attempt__number").values_list("job_id", "epoch"))
    out: dict[int, float] = {}
    for job_id, epoch in rows:
        if job_id not in out and math.isfinite(epoch):
            out[job_id] = max(float(epoch), 0.0)
    return out


def _checkpoint_step(checkpoint: Any) -> int:
    step = checkpoint.get("step") if isinstance(checkpoint, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else 0


def _columns(points: list) -> dict[str, Any]:
    """History points as columns, ready for a chart: one list per metric, aligned with ``t``."""
    names = sorted({name for _, _, metrics in points for name in metrics})
    return {
        "t": [p[0] for p in points],
        "step": [p[1] for p in points],
        "metrics": {name: [p[2].get(name) for p in points] for name in names},
    }

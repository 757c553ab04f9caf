"""Live start-time forecasts: recompute every pending job's forecast and store it.

``recompute()`` reads the cluster exactly as a scheduling cycle does
(``scheduler.snapshot.build``), runs the configured policy forward on the
simulator's engine (``scheduler.sim.forecast``) with run times estimated from
the history of finished jobs (``scheduler.core.runtime_estimate``: the owner's
recent jobs of the same class and GPU count, the time limit as a cap), stores
the forecasts and queue positions (``scheduler.forecast_store``) and announces
the jobs whose forecast changed, so their pages refresh.

A running job that reports its progress (steps and total steps, ``gpusched.job``)
has its remaining time measured instead of estimated (``scheduler.measured``).

It runs as the Celery task ``scheduler.recompute_forecasts``, asked for after
every scheduling cycle and debounced to at most two runs per
``FORECAST_INTERVAL_S`` (``scheduler.triggers.request_forecasts``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from scheduler import announce, forecast_store, loop, measured, snapshot
from scheduler.core.model import JobClass
from scheduler.core.runtime_estimate import FinishedRun, RuntimeEstimator, WithReported
from scheduler.models import Job, JobState
from scheduler.sim.forecast import ForecastLimits, forecast_starts, queue_positions

log = logging.getLogger(__name__)

#: Finished jobs the estimator learns from (the most recent ones).
HISTORY_JOBS = 5000
#: States of a job that ran to an end the estimator can learn its run time from.
FINISHED_STATES = (JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT)


@dataclass(frozen=True)
class ForecastReport:
    """One recomputation: pending jobs forecast, how many changed, seconds taken."""

    pending: int
    changed: int
    seconds: float


def history_estimator(limit: int = HISTORY_JOBS) -> RuntimeEstimator:
    """An estimator that has learned the last ``limit`` finished jobs, oldest first.
    A job's run time is its useful work (``progress_seconds``); its owner is the
    user id, as in the snapshot's ``JobSpec.user``."""
    rows = (Job.objects.filter(state__in=FINISHED_STATES, progress_seconds__gt=0, ended_at__isnull=False)
            .order_by("-ended_at", "-id").values_list("owner_id", "job_class", "num_gpus", "progress_seconds")[:limit])
    estimator = RuntimeEstimator()
    for owner, job_class, gpus, seconds in reversed(list(rows)):
        estimator.add(FinishedRun(str(owner), JobClass(job_class), gpus, seconds))
    return estimator


def recompute(now: datetime | None = None, limits: ForecastLimits = ForecastLimits()) -> ForecastReport:
    """Forecast every pending job at ``now`` (default: the current time), store, announce."""
    started = time.perf_counter()
    now = now or timezone.now()
    cycle = snapshot.build(now)
    at = now.timestamp()
    reported = measured.remaining_seconds((int(r.spec.id) for r in cycle.snapshot.running), now)
    estimator = WithReported(history_estimator(), reported)
    starts = forecast_starts(loop.current_policy(explain=False), cycle.snapshot, at, estimator,
                             limits=limits, resume_overhead=float(settings.SCHEDULER_RESUME_OVERHEAD))
    positions = queue_positions(cycle.snapshot)
    entries = {int(jid): (starts.get(jid), positions[jid]) for jid in positions}
    changed = forecast_store.write(entries, at)
    if changed:
        announce.forecasts_changed(sorted(changed))
    report = ForecastReport(len(entries), len(changed), time.perf_counter() - started)
    log.debug("forecasts: %d pending, %d changed, %.3f s", report.pending, report.changed, report.seconds)
    return report

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

Each forecast is the median start over up to ``FORECAST_DRAWS`` runs with their own
run-time draws (``scheduler.sim.forecast``, "Several futures"), as many as fit in
``DRAW_BUDGET_S`` seconds: all of them on a cluster of tens of nodes, one run at a
thousand nodes with ten thousand jobs waiting, where one run takes most of a second.

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

from scheduler import announce, forecast_store, holds, loop, measured, snapshot
from scheduler.core.model import JobClass, Snapshot
from scheduler.core.policy import Policy, queue_order
from scheduler.core.queue_order import class_orders
from scheduler.core.runtime_estimate import FinishedRun, RuntimeEstimate, RuntimeEstimator, WithReported, with_draw
from scheduler.models import Job, JobState
from scheduler.sim.forecast import ForecastLimits, forecast_starts, median_starts

log = logging.getLogger(__name__)

#: Finished jobs the estimator learns from (the most recent ones).
HISTORY_JOBS = 5000
#: States of a job that ran to an end the estimator can learn its run time from.
FINISHED_STATES = (JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT)
#: Runs per forecast at most (odd): each job's forecast is its median start over them.
FORECAST_DRAWS = 7
#: No further pair of runs is started once it would take the forecast past this many seconds
#: (judged from the runs so far). Forecasts are recomputed up to twice per FORECAST_INTERVAL_S (3 s)
#: while jobs come and go, so the extra runs must stay cheap: with a budget of 0.25 s, and still with
#: 0.1 s, a burst of 1,000 single submissions cost the worker 0.3-0.5 ms more CPU per job
#: (docs/results.md). With 0.05 s, up to about 300 jobs waiting on a small cluster get all seven
#: runs, and a queue of a thousand, or a thousand nodes, one.
DRAW_BUDGET_S = 0.05


@dataclass(frozen=True)
class ForecastReport:
    """One recomputation: pending jobs forecast, how many changed, seconds taken, runs made."""

    pending: int
    changed: int
    seconds: float
    draws: int = 1


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
    policy = loop.current_policy(explain=False)
    try:
        starts, draws = starts_within_budget(policy, cycle.snapshot, at, estimator,
                                             limits, float(settings.SCHEDULER_RESUME_OVERHEAD))
        # A job a person holds waits for them, not for the queue: no position, and none behind it moves down.
        orders = class_orders([p for p in queue_order(policy, cycle.snapshot, at) if p.hold_reason not in holds.BY_PERSON])
    except Exception as exc:  # noqa: BLE001 - the forward run is pure: any failure is a bug, and a forecast is advice
        return _withdrawn(exc, at, started)
    _last_failure.clear()
    entries = {int(p.spec.id): (starts.get(p.spec.id), i) for queue in orders.values() for i, p in enumerate(queue, 1)}
    heads = {cls.value: [int(p.spec.id) for p in queue[:forecast_store.HEAD_LENGTH]] for cls, queue in orders.items()}
    changed = forecast_store.write(entries, at, heads)
    if changed:
        announce.forecasts_changed(sorted(changed))
    report = ForecastReport(len(entries), len(changed), time.perf_counter() - started, draws)
    log.debug("forecasts: %d pending, %d changed, %.3f s, %d runs", report.pending, report.changed, report.seconds,
              report.draws)
    return report


#: The last failure logged, so that a forecast failing the same way at every recomputation logs once.
_last_failure: list[str] = []


def _withdrawn(exc: Exception, at: float, started: float) -> ForecastReport:
    """A forecast run failed (a policy's bug, or a snapshot it cannot run): withdraw every stored
    forecast, so that no page shows one computed before, and log the cause (with its traceback)
    once until it changes. Called from the ``except`` block, so the traceback is the failure's."""
    text = f"{type(exc).__name__}: {exc}"
    if _last_failure != [text]:
        log.exception("start-time forecasts failed and are withdrawn until they run again: %s", text)
        _last_failure[:] = [text]
    changed = forecast_store.write({}, at)
    if changed:
        announce.forecasts_changed(sorted(changed))
    return ForecastReport(0, len(changed), time.perf_counter() - started, 0)


def starts_within_budget(policy: Policy, snap: Snapshot, at: float, estimator: RuntimeEstimate,
                         limits: ForecastLimits, resume_overhead: float, draws: int | None = None,
                         budget: float | None = None) -> tuple[dict[str, float | None], int]:
    """Each pending job's median forecast over 1, 3, ... up to ``draws`` runs (sets of draws 0, 1,
    ...; default ``FORECAST_DRAWS``), adding a pair only while the runs so far say it ends within
    ``budget`` seconds (default ``DRAW_BUDGET_S``); with the number of runs made."""
    draws = FORECAST_DRAWS if draws is None else draws
    budget = DRAW_BUDGET_S if budget is None else budget
    runs: list[dict[str, float | None]] = []
    began = time.perf_counter()
    for k in range(draws):
        if k % 2 == 1:
            spent = time.perf_counter() - began
            if spent + 2 * spent / k > budget:
                break
        runs.append(forecast_starts(policy, snap, at, with_draw(estimator, k), limits=limits,
                                    resume_overhead=resume_overhead))
    if len(runs) % 2 == 0:  # ``draws`` was even: keep the median one of the runs
        runs.pop()
    return (runs[0] if len(runs) == 1 else median_starts(runs)), len(runs)

"""Reads behind the latency page: wait and slowdown by class over a window, and the preemption ledger."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db.models import Count, Q, Sum
from django.utils import timezone

from portal.dashboard.selectors import CLASSES, iso
from scheduler.core.metrics import percentile
from scheduler.models import Attempt, AttemptState, Job, JobState

#: Sliding windows the latency page offers, in seconds.
LATENCY_WINDOWS = (900, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600)
DEFAULT_LATENCY_WINDOW = 24 * 3600
#: Points of a CDF sent to the browser.
CDF_POINTS = 200


def cdf(values: Sequence[float], points: int = CDF_POINTS) -> dict:
    """The empirical CDF of ``values`` as ``{"x": [...], "y": [...]}``, at most ``points`` points."""
    v = sorted(values)
    n = len(v)
    if n <= points:
        return {"x": v, "y": [(i + 1) / n for i in range(n)]}
    qs = [100.0 * i / (points - 1) for i in range(points)]
    return {"x": [percentile(v, q) for q in qs], "y": [q / 100.0 for q in qs]}


def _stats(values: list[float]) -> dict:
    v = sorted(values)
    return {"count": len(v), "p50": percentile(v, 50), "p95": percentile(v, 95), "cdf": cdf(v)}


def useful_run_seconds(attempts: Sequence[Attempt], num_gpus: int) -> float:
    """Run time without interruption, estimated as time on GPUs minus the work preemptions lost."""
    held = sum(((a.ended_at or a.started_at) - a.started_at).total_seconds() for a in attempts)
    lost = sum(a.lost_gpu_seconds or 0.0 for a in attempts) / max(num_gpus, 1)
    return held - lost


#: A job that ran shorter than this counts as running this long, so that jobs
#: ending at once do not dominate the slowdown tail (Feitelson's bounded slowdown;
#: the slowdown is then at least 1, as no job can end before it has run).
MIN_RUN_SECONDS = 1.0


def latency_stats(window_s: int = DEFAULT_LATENCY_WINDOW, now: datetime | None = None) -> dict:
    """Wait and slowdown by class over the last ``window_s`` seconds, and the preemption ledger summary.

    * wait = first start - submission, for jobs that first started in the window;
      jobs still waiting are reported separately (count and longest wait so far),
      because their final wait is not known yet;
    * slowdown = (end - submission) / uninterrupted run time, for jobs that
      COMPLETED in the window; the run time is the attempts' time on GPUs minus
      the work preemptions lost (``useful_run_seconds``), at least
      ``MIN_RUN_SECONDS``, and the slowdown at least 1 (bounded slowdown: a job
      that ran 0.05 s from a submission 0.2 s earlier is not "0.2 times slower");
    * ledger: preemptions whose victim vacated in the window, their rate per
      hour, the GPU-hours of work they lost, and the share of those with a known
      outcome that wrote a checkpoint in time.
    """
    now = now or timezone.now()
    since = now - timedelta(seconds=window_s)
    waits: dict[str, list[float]] = {c: [] for c in CLASSES}
    rows = Job.objects.filter(first_started_at__gte=since, first_started_at__lte=now)
    for job_class, submitted, first in rows.values_list("job_class", "submitted_at", "first_started_at"):
        waits[job_class].append(max(0.0, (first - submitted).total_seconds()))

    slowdowns: dict[str, list[float]] = {c: [] for c in CLASSES}
    done = Job.objects.filter(state=JobState.COMPLETED, ended_at__gte=since, ended_at__lte=now)
    attempts_of: dict[int, list[Attempt]] = defaultdict(list)
    for attempt in Attempt.objects.filter(job__in=done).only(
        "job_id", "started_at", "ended_at", "lost_gpu_seconds"
    ):
        attempts_of[attempt.job_id].append(attempt)
    for job in done.only("id", "job_class", "num_gpus", "submitted_at", "ended_at"):
        run = max(useful_run_seconds(attempts_of.get(job.pk, []), job.num_gpus), MIN_RUN_SECONDS)
        slowdowns[job.job_class].append(max(1.0, (job.ended_at - job.submitted_at).total_seconds() / run))

    waiting = {}
    for job_class in CLASSES:
        pending = Job.objects.filter(state=JobState.PENDING, job_class=job_class)
        oldest = pending.order_by("submitted_at").values_list("submitted_at", flat=True).first()
        waiting[job_class] = {
            "count": pending.count(),
            "longest_s": max(0.0, (now - oldest).total_seconds()) if oldest else None,
        }

    return {
        "generated_at": iso(now),
        "window_s": window_s,
        "wait_s": {c: _stats(waits[c]) for c in CLASSES},
        "slowdown": {c: _stats(slowdowns[c]) for c in CLASSES},
        "waiting": waiting,
        "ledger": ledger_summary(since, now),
    }


def ledger_summary(since: datetime, now: datetime) -> dict:
    """Preemptions that vacated their GPUs in ``[since, now]``, summed up."""
    preempted = Attempt.objects.filter(state=AttemptState.PREEMPTED).filter(
        Q(vacated_at__gte=since, vacated_at__lte=now) | Q(vacated_at__isnull=True, ended_at__gte=since, ended_at__lte=now)
    )
    agg = preempted.aggregate(
        n=Count("id"),
        known=Count("id", filter=Q(checkpointed__isnull=False)),
        saved=Count("id", filter=Q(checkpointed=True)),
        lost=Sum("lost_gpu_seconds"),
    )
    by_class = dict(preempted.values_list("job__job_class").annotate(n=Count("id")).values_list("job__job_class", "n"))
    hours = (now - since).total_seconds() / 3600.0
    return {
        "preemptions": agg["n"],
        "per_hour": agg["n"] / hours if hours > 0 else None,
        "lost_gpu_hours": (agg["lost"] or 0.0) / 3600.0,
        "checkpointed": agg["saved"],
        "checkpoint_known": agg["known"],
        "checkpointed_share": agg["saved"] / agg["known"] if agg["known"] else None,
        "victims_by_class": {c: by_class.get(c, 0) for c in CLASSES},
    }

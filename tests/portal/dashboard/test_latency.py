"""The latency page's figures: waits and (bounded) slowdowns by class."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.dashboard.latency import latency_stats
from scheduler.models import Attempt, Job, JobState

pytestmark = pytest.mark.django_db


def _completed(owner, job_class: str, wait: float, runs: list[tuple[float, float]], now) -> Job:  # noqa: ANN001
    """A job submitted ``wait`` seconds before its first attempt, with attempts of (run seconds, lost GPU-seconds)
    back to back, the last ending at ``now``."""
    total = wait + sum(run for run, _ in runs)
    submitted = now - timedelta(seconds=total)
    job = Job.objects.create(owner=owner, name="j", command="true", job_class=job_class, num_gpus=1,
                             state=JobState.COMPLETED, submitted_at=submitted, ended_at=now,
                             first_started_at=submitted + timedelta(seconds=wait), attempt_count=len(runs))
    start = submitted + timedelta(seconds=wait)
    for number, (run, lost) in enumerate(runs, start=1):
        end = start + timedelta(seconds=run)
        Attempt.objects.create(job=job, number=number, gpu_allocation={"n1": [0]}, state="COMPLETED",
                               started_at=start, ended_at=end, lost_gpu_seconds=lost)
        start = end
    return job


def test_slowdowns_are_bounded_below_by_one_and_count_lost_work(roles) -> None:  # noqa: ANN001
    now = timezone.now()
    _completed(roles.owner, "TE", wait=0.15, runs=[(0.05, 0.0)], now=now)  # ended at once: 0.2 s over a 1-s floor
    _completed(roles.owner, "TE", wait=30.0, runs=[(10.0, 0.0)], now=now)  # (30 + 10) / 10
    _completed(roles.owner, "BE", wait=0.0, runs=[(20.0, 10.0), (30.0, 0.0)], now=now)  # 50 s over 40 s of useful run
    stats = latency_stats(3600, now=now + timedelta(seconds=1))
    te, be = stats["slowdown"]["TE"], stats["slowdown"]["BE"]
    assert (te["count"], te["p50"], te["p95"]) == (2, pytest.approx(2.5), pytest.approx(3.85))  # of 1 and 4
    assert (be["count"], be["p50"]) == (1, pytest.approx(50 / 40))
    assert (stats["wait_s"]["TE"]["count"], stats["wait_s"]["TE"]["p50"]) == (2, pytest.approx(15.075))

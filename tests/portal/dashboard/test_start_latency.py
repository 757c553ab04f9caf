"""The submit-to-start histogram of /metrics: the same as counting every started job afresh, while a scrape
reads only the starts of the last minutes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.dashboard import start_latency
from scheduler.models import Job, JobState

pytestmark = pytest.mark.django_db


def _started(make_job, owner, job_class: str, submitted, waited_s: float) -> None:  # noqa: ANN001
    job = make_job(owner, job_class=job_class, state=JobState.COMPLETED)
    Job.objects.filter(pk=job.pk).update(submitted_at=submitted, first_started_at=submitted + timedelta(seconds=waited_s))


def _same(a: start_latency.Tally, b: start_latency.Tally) -> bool:
    """Equal counts, and sums equal but for the order in which floats were added."""
    return a.keys() == b.keys() and all(a[k][0] == b[k][0] and a[k][1] == pytest.approx(b[k][1]) for k in a)


def test_the_histogram_is_every_started_job_as_the_clock_moves_on(roles, make_job):
    now = timezone.now()
    for hours_ago, waited in ((48, 0.3), (2, 4000.0), (0.5, 20.0), (0, 1.5)):
        _started(make_job, roles.owner, "BE" if waited > 10 else "TE", now - timedelta(hours=hours_ago), waited)
    make_job(roles.owner)  # never started: not counted
    assert _same(start_latency.histogram(now), start_latency.tally())
    assert start_latency.tally()["BE"][0][-1] == 2 and start_latency.tally()["TE"][1] == pytest.approx(1.8)
    for minutes in (5, 30, 90):  # later scrapes, with more starts in between, settled and not
        later = now + timedelta(minutes=minutes)
        _started(make_job, roles.other, "BE", later - timedelta(minutes=20), 600.0)
        _started(make_job, roles.other, "TE", later - timedelta(seconds=3), 0.2)
        assert _same(start_latency.histogram(later), start_latency.tally())


def test_a_scrape_reads_only_the_starts_since_the_settled_ones(roles, make_job):
    now = timezone.now()
    _started(make_job, roles.owner, "BE", now - timedelta(days=3), 50.0)
    start_latency.histogram(now)
    with CaptureQueriesContext(connection) as queries:
        again = start_latency.histogram(now + timedelta(seconds=15))
    assert len(queries) == 1 and '"first_started_at" >=' in queries[0]["sql"]
    assert again["BE"][0][-1] == 1


def test_tallies_of_disjoint_jobs_add_up():
    a = {"TE": ([1, 2, 2], 3.0)}
    b = {"TE": ([0, 1, 4], 10.0), "BE": ([0, 0, 1], 99.0)}
    assert start_latency.added(a, b) == {"TE": ([1, 3, 6], 13.0), "BE": ([0, 0, 1], 99.0)}
    assert a == {"TE": ([1, 2, 2], 3.0)}  # neither is changed

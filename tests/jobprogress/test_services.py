"""Storing progress: latest values merged, history bounded, reports for attempts elsewhere dropped."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobprogress import services
from jobprogress.models import MAX_HISTORY_POINTS, AttemptProgress
from jobprogress.selectors import job_progress
from tests.support.placed_jobs import placed_job
from tests.support.live_helpers import make_node, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(no_triggers):  # noqa: ANN001
    make_node("n1", 2)
    return placed_job(make_user("alice"), {"n1": [0]})


def test_reports_merge_into_the_latest_progress_and_the_selector_derives_eta(job) -> None:
    now = timezone.now()
    assert services.record_progress(job.pk, 1, {"t": 100.0, "step": 10, "total_steps": 110,
                                                 "metrics": {"loss": 2.0, "acc": 0.1}}, now, node="n1")
    assert services.record_progress(job.pk, 1, {"t": 110.0, "step": 60, "metrics": {"loss": 1.0}}, now, node="n1")
    assert services.record_progress(job.pk, 1, {"checkpoint": {"step": 60, "path": "ck/60"}}, now, node="n1")
    got = job_progress(job.pk)
    assert (got["attempt"], got["step"], got["total_steps"], got["metrics"]) == (1, 60, 110, {"loss": 1.0, "acc": 0.1})
    assert got["fraction"] == pytest.approx(60 / 110) and got["checkpoint"] == {"step": 60, "path": "ck/60"}
    assert got["steps_per_second"] == 5.0 and got["eta_seconds"] == 10.0
    assert got["history"] == {"t": [100.0, 110.0], "step": [10, 60], "metrics": {"acc": [0.1, None], "loss": [2.0, 1.0]}}


def test_the_history_stays_bounded_and_keeps_its_first_and_last_points(job) -> None:
    now = timezone.now()
    for i in range(3 * MAX_HISTORY_POINTS):
        services.record_progress(job.pk, 1, {"t": float(i), "step": i}, now, node="n1")
    history = AttemptProgress.objects.get(job=job).history
    assert len(history) <= MAX_HISTORY_POINTS
    assert history[0][1] == 0 and history[-1][1] == 3 * MAX_HISTORY_POINTS - 1
    assert [p[1] for p in history] == sorted(p[1] for p in history)


def test_a_report_from_another_node_or_for_an_unknown_attempt_is_dropped(job) -> None:
    make_node("n2", 1)
    now = timezone.now()
    assert not services.record_progress(job.pk, 1, {"step": 1}, now, node="n2")
    assert not services.record_progress(job.pk, 7, {"step": 1}, now, node="n1")
    assert job_progress(job.pk) is None


def _at(seconds: float):  # noqa: ANN202
    from datetime import datetime, timezone as tz

    return datetime.fromtimestamp(seconds, tz=tz.utc)


def test_a_running_attempt_that_reports_steps_has_its_remaining_time_measured(job) -> None:
    from jobprogress.selectors import running_remaining_seconds

    services.record_progress(job.pk, 1, {"t": 990.0, "step": 10, "total_steps": 110}, _at(990.0), node="n1")
    services.record_progress(job.pk, 1, {"t": 1000.0, "step": 60}, _at(1000.0), node="n1")
    # 5 steps/s and 50 steps left: 10 s at the report, 4 s six seconds later, never below 0.
    assert running_remaining_seconds([job.pk], _at(1006.0)) == {job.pk: pytest.approx(4.0)}
    assert running_remaining_seconds([job.pk], _at(1030.0)) == {job.pk: 0.0}
    assert running_remaining_seconds([], _at(1006.0)) == {}
    # Once the attempt has ended (a pending job's resumed attempt may redo steps), nothing is measured.
    from scheduler.models import Attempt

    Attempt.objects.filter(job=job).update(state="PREEMPTED")
    assert running_remaining_seconds([job.pk], _at(1006.0)) == {}


def test_steps_without_a_total_or_a_rate_measure_nothing(job) -> None:
    from jobprogress.selectors import running_remaining_seconds

    services.record_progress(job.pk, 1, {"t": 990.0, "step": 10}, _at(990.0), node="n1")
    services.record_progress(job.pk, 1, {"t": 1000.0, "step": 60}, _at(1000.0), node="n1")
    assert running_remaining_seconds([job.pk], _at(1001.0)) == {}  # no total
    services.record_progress(job.pk, 1, {"total_steps": 100}, _at(1000.0), node="n1")
    assert running_remaining_seconds([job.pk], _at(1001.0)) == {job.pk: pytest.approx(7.0)}


def test_reported_steps_come_from_the_running_attempt_or_else_the_latest_checkpoint(job) -> None:
    from jobprogress.selectors import reported_steps
    from scheduler.models import Attempt

    services.record_progress(job.pk, 1, {"t": 1.0, "step": 40}, _at(1.0), node="n1")
    assert reported_steps([job.pk]) == {}  # no total declared
    services.record_progress(job.pk, 1, {"t": 2.0, "step": 60, "total_steps": 100}, _at(2.0), node="n1")
    assert reported_steps([job.pk]) == {job.pk: (60.0, 100)}
    Attempt.objects.filter(job=job).update(state="PREEMPTED")
    assert reported_steps([job.pk]) == {job.pk: (0.0, 100)}  # no checkpoint: starts again from 0
    services.record_progress(job.pk, 1, {"checkpoint": {"step": 50, "path": "ck"}}, _at(3.0), node="n1")
    assert reported_steps([job.pk]) == {job.pk: (50.0, 100)}
    assert reported_steps([]) == {}

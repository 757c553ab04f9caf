"""REPORT_PROGRESS on the server: authenticated like every report; hostile fields dropped, nothing stored."""

from __future__ import annotations

import math

import pytest

from cluster import protocol
from jobprogress import tasks
from jobprogress.models import AttemptProgress
from tests.support.placed_jobs import placed_job
from tests.support.live_helpers import make_node, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(no_triggers):  # noqa: ANN001
    make_node("n1", 2)
    return placed_job(make_user("alice"), {"n1": [0]})


def test_the_task_is_registered_under_the_protocol_name() -> None:
    from portal.celery import app

    assert protocol.REPORT_PROGRESS in app.tasks


def test_a_report_is_stored_and_unknown_fields_of_a_newer_agent_are_ignored(job) -> None:
    tasks.progress.apply(kwargs={"node": "n1", "job_id": job.pk, "attempt": 1, "step": 3, "token": "",
                                 "metrics": {"loss": 0.5}, "gpu_util": 99})
    row = AttemptProgress.objects.get(job=job)
    assert (row.step, row.metrics) == (3, {"loss": 0.5})


@pytest.mark.parametrize("fields", [
    {"step": math.nan}, {"metrics": {"loss": math.inf}}, {"metrics": {f"m{i}": 1 for i in range(17)}},
    {"metrics": {"x" * 500: 1}}, {"step": "3"}, {"checkpoint": {"path": "p" * 10_000}}, {"job_id": "../etc"},
])
def test_hostile_reports_are_dropped(job, fields, caplog) -> None:
    kwargs = {"node": "n1", "job_id": job.pk, "attempt": 1, "token": "", **fields}
    tasks.progress.apply(kwargs=kwargs)
    assert not AttemptProgress.objects.exists()
    assert "cluster.progress from node 'n1' dropped" in caplog.text


def test_a_wrong_agent_token_is_refused(job, settings) -> None:
    settings.AGENT_TOKEN = "s3cret"
    tasks.progress.apply(kwargs={"node": "n1", "job_id": job.pk, "attempt": 1, "step": 1, "token": "wrong"})
    assert not AttemptProgress.objects.exists()
    tasks.progress.apply(kwargs={"node": "n1", "job_id": job.pk, "attempt": 1, "step": 1, "token": "s3cret"})
    assert AttemptProgress.objects.filter(job=job, step=1).exists()

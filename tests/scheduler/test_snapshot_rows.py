"""The rows a cycle reads: the readers of the kept rows, by id or whole, with or without versions."""

from __future__ import annotations

import logging

import pytest
from django.db import connection

from scheduler import loop, snapshot_rows
from scheduler.kept_rows import ACTIVE_ROWS, PENDING_ROWS, versions_sql
from scheduler.models import Attempt, Job, JobState
from tests.support.live_helpers import make_node, make_user, submit

pytestmark = pytest.mark.django_db


def _versions(with_attempt: bool, states: list[str], order: str) -> dict[int, str]:
    with connection.cursor() as cursor:
        cursor.execute(versions_sql(with_attempt, order), [states])
        return dict(cursor.fetchall())


def test_pending_rows_whole_come_in_submission_order_with_the_versions_the_query_reads() -> None:
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    whole = snapshot_rows.pending_rows(None, True)
    assert list(whole) == [j.pk for j in jobs]
    assert {pk: version for pk, (version, _) in whole.items()} == _versions(False, ["PENDING"], "j.id")
    assert all(row["submitted_s"] == pytest.approx(j.submitted_at.timestamp()) for j, (_, row) in zip(jobs, whole.values()))
    by_id = snapshot_rows.pending_rows([jobs[1].pk, 10**9], False)
    assert list(by_id) == [jobs[1].pk] and by_id[jobs[1].pk][0] == ""


def test_active_rows_pair_each_job_with_its_current_attempt_and_leave_out_one_without(
        sent, django_capture_on_commit_callbacks, caplog) -> None:  # noqa: ANN001
    make_node("n1", 2)
    alice = make_user("alice")
    a, b = submit(alice, "a"), submit(alice, "b")
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    PENDING_ROWS.clear(), ACTIVE_ROWS.clear()
    whole = snapshot_rows.active_rows(None, True)
    assert list(whole) == [a.pk, b.pk]
    states = ["STARTING", "RUNNING", "PREEMPTING", "CANCELLING"]
    assert {pk: version for pk, (version, _) in whole.items()} == _versions(True, states, "j.id")
    job, attempt = whole[b.pk][1]
    assert (job["state"], attempt["number"], attempt["gpu_allocation"]) == (JobState.STARTING, 1, {"n1": [1]})
    Attempt.objects.filter(job=b).delete()
    with caplog.at_level(logging.ERROR, logger="scheduler.snapshot"):
        assert list(snapshot_rows.active_rows([a.pk, b.pk], False)) == [a.pk]
    assert f"job {b.pk} is STARTING but has no attempt 1" in caplog.text
    assert Job.objects.get(pk=b.pk).state == JobState.STARTING

"""Log retention: the stored logs of attempts that ended before the cutoff are replaced by one line;
running attempts, recent ones and every other table stay; a second run changes nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.contrib.auth import get_user_model

from scheduler.attempt_log import AttemptLog
from scheduler.log_retention import Purged, purge_logs
from scheduler.models import Attempt, Job

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)


def attempt_with_log(name: str, ended_days_ago: float | None, texts: list[str], number: int = 1) -> Attempt:
    owner, _ = get_user_model().objects.get_or_create(username="keeper")
    job = Job.objects.create(owner=owner, name=name, command="true", num_gpus=1)
    ended = None if ended_days_ago is None else NOW - timedelta(days=ended_days_ago)
    attempt = Attempt.objects.create(job=job, number=number, state="RUNNING" if ended is None else "COMPLETED",
                                     ended_at=ended)
    for text in texts:
        AttemptLog.objects.create(attempt=attempt, text=text)
    return attempt


def texts(attempt: Attempt) -> list[str]:
    return list(AttemptLog.objects.filter(attempt=attempt).order_by("id").values_list("text", flat=True))


def test_old_logs_are_replaced_by_one_line_and_the_rest_is_left_alone():
    old = attempt_with_log("old", 40, ["a\nb", "c"], number=2)
    recent = attempt_with_log("recent", 5, ["kept 1", "kept 2"])
    running = attempt_with_log("running", None, ["still running"])
    done = purge_logs(NOW - timedelta(days=30), NOW)
    assert done == Purged(attempts=1, rows=2, lines=3, characters=4)
    [line] = texts(old)
    assert line.startswith("[portal] the 3 stored line(s) of this log were deleted on 2026-12-06")
    assert f"jobs/{old.job_id}/attempt-2.log" in line
    assert AttemptLog.objects.get(attempt=old).purged
    assert texts(recent) == ["kept 1", "kept 2"] and texts(running) == ["still running"]
    assert Attempt.objects.filter(pk=old.pk).exists() and Job.objects.filter(pk=old.job_id).exists()


def test_a_second_run_changes_nothing():
    old = attempt_with_log("old", 40, ["a", "b"])
    purge_logs(NOW - timedelta(days=30), NOW)
    first = texts(old)
    assert purge_logs(NOW - timedelta(days=30), NOW + timedelta(days=1)) == Purged()
    assert texts(old) == first


def test_a_job_that_prints_what_the_retention_line_says_is_purged_all_the_same():
    forged = attempt_with_log("forger", 40, ["[portal] the 1 stored line(s) of this log were deleted"] * 3)
    assert purge_logs(NOW - timedelta(days=30), NOW).rows == 3
    assert len(texts(forged)) == 1 and AttemptLog.objects.get(attempt=forged).purged


def test_a_dry_run_counts_and_writes_nothing():
    old = attempt_with_log("old", 40, ["a\nb\nc"])
    assert purge_logs(NOW - timedelta(days=30), NOW, dry_run=True) == Purged(attempts=1, rows=1, lines=3,
                                                                             characters=5)
    assert texts(old) == ["a\nb\nc"]


def test_many_attempts_are_purged_a_batch_at_a_time():
    old = [attempt_with_log(f"old{i}", 40, [f"line {i}"]) for i in range(7)]
    assert purge_logs(NOW - timedelta(days=30), NOW, batch=3) == Purged(attempts=7, rows=7, lines=7, characters=42)
    assert all(AttemptLog.objects.get(attempt=a).purged for a in old)

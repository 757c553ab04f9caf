"""manage.py purge_job_logs: its summary, its dry run, and bad arguments named."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from scheduler.attempt_log import AttemptLog
from scheduler.models import Attempt
from tests.support.live_helpers import make_user, submit

pytestmark = pytest.mark.django_db


def old_attempt() -> Attempt:
    job = submit(make_user("purger"), name="old")
    attempt = Attempt.objects.create(job=job, number=1, state="COMPLETED", ended_at=timezone.now() - timedelta(days=91))
    AttemptLog.objects.create(attempt=attempt, text="one\ntwo")
    return attempt


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("purge_job_logs", *args, stdout=out)
    return out.getvalue()


def test_the_command_says_what_it_deleted_and_a_dry_run_what_it_would():
    attempt = old_attempt()
    assert run("--days", "90", "--dry-run").startswith("would delete the stored logs of 1 attempt(s)")
    assert AttemptLog.objects.get(attempt=attempt).text == "one\ntwo"
    assert "deleted the stored logs of 1 attempt(s) that ended more than 90 day(s) ago: 1 batch(es), 2 line(s)" \
        in run("--days", "90")
    assert AttemptLog.objects.get(attempt=attempt).purged
    assert run("--days", "100").startswith("deleted the stored logs of 0 attempt(s)")


@pytest.mark.parametrize("args, message", [(["--days", "0"], "--days"), (["--days", "30", "--batch", "0"], "--batch")])
def test_bad_arguments_are_named(args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)

"""A report that finds the database unreachable is retried, not dropped; other failures are not retried."""

from __future__ import annotations

import time

import pytest
from celery.exceptions import Retry
from django import db

from cluster import liveness, reports, tasks

# The reports run inside the test's transaction: the database is reached only to set no lock wait limit
# (scheduler/row_locks.py; a report about a held row is tested in tests/scheduler/test_row_locks.py).
pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("error", [db.OperationalError("server closed the connection"), db.InterfaceError("gone")])
def test_a_report_is_retried_while_the_database_is_unreachable(monkeypatch, error) -> None:
    def down(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise error

    monkeypatch.setattr(reports, "attempt_exited", down)
    with pytest.raises(Retry):
        tasks.exited(node="n1", job_id=1, attempt=1, exit_code=0, signal=None, ended_at=time.time(),
                     notice_at=None, checkpointed=False, reason=None, token="")


def test_a_bug_is_not_retried(monkeypatch) -> None:
    monkeypatch.setattr(liveness, "heartbeat", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        tasks.heartbeat(node="n1", running=[], token="")

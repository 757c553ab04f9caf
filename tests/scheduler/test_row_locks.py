"""A row another transaction holds delays only its own job (scheduler/row_locks.py), on real
PostgreSQL: the holder is a second connection of the test that keeps a job's or a GPU's row locked
in an open transaction, as a shell left open or a slow writer would."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from cluster.models import Gpu
from scheduler import loop, pending_reasons, row_locks
from scheduler.models import Attempt, Job, JobState
from tests.support.live_helpers import allocation_problems, make_node, make_user, submit
from tests.support.livestack import _database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

WAIT_S = 0.5


@pytest.fixture()
def holder(settings) -> Iterator[psycopg.Connection]:  # noqa: ANN001
    """A second session, in a transaction of its own, for the test to lock rows with."""
    settings.SCHEDULER_ROW_LOCK_WAIT = WAIT_S
    conn = psycopg.connect(_database_url())
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture(autouse=True)
def no_row_held_before() -> Iterator[None]:
    """Each test starts with no kind of statement marked as having passed over a row."""
    row_locks._held_before.clear()  # noqa: SLF001
    row_locks._warned_at.clear()  # noqa: SLF001
    yield
    row_locks._held_before.clear()  # noqa: SLF001
    row_locks._warned_at.clear()  # noqa: SLF001


def _hold(conn: psycopg.Connection, table: str, pk: int) -> None:
    conn.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", (pk,))


def _lock_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        return cursor.fetchone()[0]


def test_rows_held_past_the_limit_are_passed_over_and_the_session_keeps_its_own_limit(holder) -> None:  # noqa: ANN001
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    _hold(holder, "scheduler_job", jobs[1].pk)
    with transaction.atomic():
        before = _lock_timeout()
        t0 = time.monotonic()
        rows, passed_over = row_locks.locked(Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk")
                                             .values_list("pk", flat=True))
        waited = time.monotonic() - t0
        assert _lock_timeout() == before == "0"
    assert (rows, passed_over) == ([jobs[0].pk, jobs[2].pk], True)
    assert waited >= WAIT_S


def test_while_a_row_stays_held_statements_of_its_kind_wait_briefly_then_fully_again_once_all_come_through(
        holder) -> None:  # noqa: ANN001
    """A row held past the limit is likely held at the next cycle too: waiting the whole limit for it
    in every cycle would delay every start by as much."""
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    rows_of = Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk").values_list("pk", flat=True)
    _hold(holder, "scheduler_job", jobs[1].pk)

    def lock() -> tuple[list[int], bool, float]:
        t0 = time.monotonic()
        with transaction.atomic():
            rows, passed = row_locks.locked(rows_of, what="job rows")
        return rows, passed, time.monotonic() - t0

    rows, passed, waited = lock()
    assert (rows, passed) == ([jobs[0].pk, jobs[2].pk], True) and waited >= WAIT_S
    assert row_locks.limit_ms("job rows") == row_locks.BRIEF_WAIT_MS
    assert row_locks.limit_ms("GPU rows") == 1000 * WAIT_S  # other kinds of statement are not affected
    rows, passed, waited = lock()
    assert (rows, passed) == ([jobs[0].pk, jobs[2].pk], True) and waited < WAIT_S  # it waited briefly

    holder.rollback()
    assert lock()[:2] == ([j.pk for j in jobs], False)
    assert row_locks.limit_ms("job rows") == 1000 * WAIT_S


def test_a_row_that_stays_held_is_warned_about_once_a_minute_not_every_cycle(holder, caplog, monkeypatch) -> None:  # noqa: ANN001
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(2)]
    rows_of = Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk").values_list("pk", flat=True)
    _hold(holder, "scheduler_job", jobs[0].pk)
    clock = [1000.0]
    monkeypatch.setattr(row_locks.time, "monotonic", lambda: clock[0])

    def warnings_after_a_cycle(seconds_later: float) -> list[str]:
        clock[0] += seconds_later
        caplog.clear()
        with caplog.at_level("DEBUG", logger="scheduler.apply"), transaction.atomic():
            row_locks.locked(rows_of, what="job rows")
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    assert warnings_after_a_cycle(0) == ["job rows held by another transaction for over 0.5 s: passed over in this cycle"]
    assert warnings_after_a_cycle(5) == [] and warnings_after_a_cycle(5) == []  # debug lines only
    assert warnings_after_a_cycle(row_locks.WARN_EVERY_S) == [
        "job rows held by another transaction for over 0.05 s: passed over in this cycle (still held; said again "
        "every 60 s)"]
    holder.rollback()
    assert warnings_after_a_cycle(5) == []
    _hold(holder, "scheduler_job", jobs[1].pk)  # held again later: said at once
    assert len(warnings_after_a_cycle(5)) == 1


def test_a_row_released_within_the_limit_is_waited_for(holder, settings) -> None:  # noqa: ANN001
    settings.SCHEDULER_ROW_LOCK_WAIT = 30
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(2)]
    _hold(holder, "scheduler_job", jobs[0].pk)
    holder.execute("UPDATE scheduler_job SET state = 'CANCELLED' WHERE id = %s", (jobs[0].pk,))
    threading.Timer(0.3, holder.commit).start()
    with transaction.atomic():
        rows, passed_over = row_locks.locked(Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk")
                                             .values_list("pk", "state"))
    assert passed_over is False
    assert rows == [(jobs[0].pk, "CANCELLED"), (jobs[1].pk, "PENDING")]  # the holder's write, read after it


def test_with_no_limit_a_lock_waits_as_long_as_it_takes(holder, settings) -> None:  # noqa: ANN001
    settings.SCHEDULER_ROW_LOCK_WAIT = 0
    job = submit(make_user("alice"), "j")
    _hold(holder, "scheduler_job", job.pk)
    threading.Timer(2 * WAIT_S + 0.5, holder.commit).start()
    t0 = time.monotonic()
    with transaction.atomic():
        rows, passed_over = row_locks.locked(Job.objects.filter(pk=job.pk).values_list("pk", flat=True))
    assert (rows, passed_over) == ([job.pk], False)
    assert time.monotonic() - t0 >= 2 * WAIT_S


def test_a_cycle_starts_every_job_but_the_one_whose_row_is_held_and_starts_it_once_released(
        holder, sent) -> None:  # noqa: ANN001
    make_node("n1", 2)
    alice, bob = make_user("alice"), make_user("bob")
    held, other = submit(alice, "held"), submit(bob, "other")
    _hold(holder, "scheduler_job", held.pk)

    report = loop.run_cycle()

    assert report.applied.started == [other.pk]
    assert [(job_id, why.split(":")[0]) for job_id, why in report.applied.skipped] == [
        (str(held.pk), "row held by another transaction past SCHEDULER_ROW_LOCK_WAIT, or deleted")]
    assert not Attempt.objects.filter(job=held).exists() and Job.objects.get(pk=held.pk).state == JobState.PENDING
    holder.rollback()
    assert loop.run_cycle().applied.started == [held.pk]
    assert allocation_problems() == []


def test_a_held_gpu_row_counts_as_not_free(holder, sent) -> None:  # noqa: ANN001
    make_node("n1", 1)
    make_node("n2", 1)
    alice = make_user("alice")
    first, second = submit(alice, "first"), submit(alice, "second")
    _hold(holder, "cluster_gpu", Gpu.objects.get(node__name="n1").pk)

    report = loop.run_cycle()

    assert len(report.applied.started) == 1 and len(report.applied.skipped) == 1
    assert report.applied.skipped[0][1] == "n1 has 0 free GPUs, 1 needed"
    assert Gpu.objects.get(node__name="n1").allocated_to_id is None
    holder.rollback()
    loop.run_cycle()
    assert Job.objects.filter(pk__in=[first.pk, second.pk], state=JobState.STARTING).count() == 2
    assert allocation_problems() == []


def test_pending_reasons_are_written_to_every_row_but_a_held_one(holder) -> None:  # noqa: ANN001
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    _hold(holder, "scheduler_job", jobs[0].pk)
    written = pending_reasons.write_pends({j.pk: ("Resources", f"reason {j.pk}") for j in jobs})
    assert written == 2
    got = dict(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", "pending_message"))
    assert got == {jobs[0].pk: "", jobs[1].pk: f"reason {jobs[1].pk}", jobs[2].pk: f"reason {jobs[2].pk}"}
    # The next cycle's reasons wait for the row briefly, and fully again once every row was written.
    assert row_locks.limit_ms(pending_reasons.PENDING_ROWS) == row_locks.BRIEF_WAIT_MS
    holder.rollback()
    assert pending_reasons.write_pends({jobs[0].pk: ("Resources", "now")}) == 1
    assert row_locks.limit_ms(pending_reasons.PENDING_ROWS) == 1000 * WAIT_S


def test_cancel_kills_pass_over_an_attempt_row_held_by_another_transaction(holder, sent) -> None:  # noqa: ANN001
    from scheduler import cancel_kills
    from scheduler.services import cancel_job

    make_node("n1", 2)
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(2)]
    loop.run_cycle()
    for job in jobs:
        cancel_job(Job.objects.get(pk=job.pk), alice)
    _hold(holder, "scheduler_attempt", Attempt.objects.get(job=jobs[0]).pk)
    with transaction.atomic():
        assert cancel_kills.request_cancel_kills(timezone.now()) == [jobs[1].pk]
    holder.rollback()
    with transaction.atomic():
        assert cancel_kills.request_cancel_kills(timezone.now()) == [jobs[0].pk]


def test_an_agent_report_about_a_held_job_is_retried_instead_of_holding_a_worker(holder, sent) -> None:  # noqa: ANN001
    from celery.exceptions import Retry

    from cluster import reports, tasks

    make_node("n1", 1)
    job = submit(make_user("alice"), "j")
    loop.run_cycle()
    reports.attempt_started("n1", job.pk, 1, 4242, timezone.now())
    exit_report = {"node": "n1", "job_id": job.pk, "attempt": 1, "exit_code": 0, "signal": None,
                   "ended_at": time.time(), "notice_at": None, "checkpointed": False, "reason": None, "token": ""}
    _hold(holder, "scheduler_job", job.pk)
    with pytest.raises(Retry):
        tasks.exited(**exit_report)
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    assert _lock_timeout() == "0"  # the worker's session keeps its own limit for its other work
    holder.rollback()
    tasks.exited(**exit_report)
    assert Job.objects.get(pk=job.pk).state == JobState.COMPLETED

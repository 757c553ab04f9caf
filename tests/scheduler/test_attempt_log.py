"""An attempt's stored log: line counts kept with each batch, and the reads that never load a
whole long log (the newest lines for a page, a numbered page for the API)."""

from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import attempt_log
from scheduler.attempt_log import AttemptLog, AttemptLogQuerySet, count_lines, log_page, log_tail
from scheduler.models import Attempt, Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def attempt(django_user_model) -> Attempt:
    owner = django_user_model.objects.create_user("logger")
    job = Job.objects.create(owner=owner, command="true", num_gpus=1)
    return Attempt.objects.create(job=job, number=1, state="RUNNING")


def store(attempt: Attempt, batches: list[list[str]]) -> list[str]:
    """Store each batch as one row; every line in order."""
    for batch in batches:
        AttemptLog.objects.create(attempt=attempt, text="\n".join(batch))
    return [line for batch in batches for line in batch]


def numbered_batches(sizes: list[int]) -> list[list[str]]:
    batches, n = [], 0
    for size in sizes:
        batches.append([f"line {i}" for i in range(n, n + size)])
        n += size
    return batches


def test_each_row_counts_its_lines_when_saved(attempt):
    rows = [AttemptLog.objects.create(attempt=attempt, text=text) for text in ("one", "a\nb\nc", "", "x\n")]
    assert [r.line_count for r in rows] == [1, 3, 1, 2] == [count_lines(r.text) for r in rows]
    assert [r.text.split("\n") for r in rows][2:] == [[""], ["x", ""]]  # as the reads split them


def test_rows_created_in_bulk_count_their_lines_too(attempt):
    AttemptLog.objects.bulk_create(AttemptLog(attempt=attempt, text=text) for text in ("a\nb", "c"))
    assert list(AttemptLog.objects.order_by("id").values_list("line_count", flat=True)) == [2, 1]


def test_the_migration_counts_rows_stored_before_it(attempt):
    store(attempt, [["a", "b"], ["c"], ["d", "e", "f"]])
    AttemptLog.objects.update(line_count=0)
    migration = importlib.import_module("scheduler.migrations.0016_attempt_log_line_count")
    migration.count_stored_lines(apps, None)
    assert list(AttemptLog.objects.order_by("id").values_list("line_count", flat=True)) == [2, 1, 3]


def test_the_tail_reads_the_newest_rows_only_until_it_has_its_lines(attempt, monkeypatch):
    lines = store(attempt, numbered_batches([1_000] * 50))
    counted = []
    monkeypatch.setattr(attempt_log, "count_lines", lambda text: counted.append(text) or count_lines(text))
    tail = log_tail(attempt.pk, 2_500)
    assert len(counted) == 3  # rows of 1,000 lines: three hold the last 2,500, the other 47 stay unread
    assert tail.lines == lines[-2_500:] and tail.truncated
    assert tail.last_id == AttemptLog.objects.latest("id").pk
    assert log_tail(attempt.pk, 60_000).lines == lines and not log_tail(attempt.pk, 60_000).truncated
    assert log_tail(attempt.pk, 50_000).truncated is False


def test_the_tail_after_a_row_gives_only_newer_lines_and_says_when_more_came_than_it_holds(attempt):
    store(attempt, numbered_batches([10, 10]))
    seen = log_tail(attempt.pk, 100).last_id
    assert log_tail(attempt.pk, 100, seen).lines == [] and log_tail(attempt.pk, 100, seen).last_id == seen
    store(attempt, [["new 1", "new 2"], ["new 3"]])
    newer = log_tail(attempt.pk, 100, seen)
    assert (newer.lines, newer.truncated) == (["new 1", "new 2", "new 3"], False)
    cut = log_tail(attempt.pk, 2, seen)
    assert (cut.lines, cut.truncated, cut.last_id) == (["new 2", "new 3"], True, newer.last_id)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=0, max_size=12), offset=st.integers(0, 300),
       limit=st.integers(1, 120))
def test_a_page_is_the_same_slice_of_the_log_however_it_was_batched(sizes, offset, limit):
    owner, _ = get_user_model().objects.get_or_create(username="pager")
    job = Job.objects.create(owner=owner, command="true", num_gpus=1)
    attempt = Attempt.objects.create(job=job, number=1, state="RUNNING")
    lines = store(attempt, numbered_batches(sizes))
    page = log_page(attempt.pk, offset, limit)
    assert page.lines == lines[offset:offset + limit]
    assert (page.total, page.next_offset) == (len(lines), offset + len(page.lines))
    assert page.more == (offset + limit < len(lines))


def test_a_tail_page_starts_at_the_last_lines_and_pages_on_from_there(attempt):
    lines = store(attempt, numbered_batches([7, 7, 7]))
    page = log_page(attempt.pk, 0, 4, tail=10)
    assert (page.offset, page.lines, page.more) == (11, lines[11:15], True)
    assert log_page(attempt.pk, 0, 100, tail=100).lines == lines


@pytest.mark.parametrize("offset", [2, 18])  # the running sum from the start, and from the end
def test_lines_stored_while_a_page_is_read_do_not_shift_its_start(attempt, monkeypatch, offset):
    lines = store(attempt, numbered_batches([7, 7, 7]))
    original = AttemptLogQuerySet.aggregate

    def aggregate_then_a_batch_arrives(self, *args, **kwargs):  # noqa: ANN001, ANN202
        result = original(self, *args, **kwargs)
        AttemptLog.objects.create(attempt=attempt, text="late 1\nlate 2")
        return result

    monkeypatch.setattr(AttemptLogQuerySet, "aggregate", aggregate_then_a_batch_arrives)
    page = log_page(attempt.pk, offset, 100)
    assert page.lines == lines[offset:] + ["late 1", "late 2"] and page.total == 21


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_logs_total_and_a_pages_first_row_are_read_from_the_index_once_vacuumed(django_user_model):
    """What ``gpusched logs --follow`` asks on every poll of a long log, answered without its rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    owner = django_user_model.objects.create_user("vacuumed")
    job = Job.objects.create(owner=owner, command="true", num_gpus=1)
    runs = [Attempt.objects.create(job=job, number=n, state="RUNNING") for n in range(1, 11)]
    # Ten attempts' batches interleaved, as jobs running side by side store them.
    AttemptLog.objects.bulk_create(AttemptLog(attempt=r, text="a\nb") for _ in range(2000) for r in runs)
    run = runs[0]
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE scheduler_attemptlog")
    with CaptureQueriesContext(connection) as queries:
        assert log_page(run.pk, 3990, 5).lines == ["a", "b", "a", "b", "a"]
    total_sql, first_row_sql = queries.captured_queries[0]["sql"], queries.captured_queries[1]["sql"]
    assert "SUM" in total_sql and "OVER" in first_row_sql
    with connection.cursor() as cursor:
        # A table this small would be read whole or through a bitmap otherwise.
        cursor.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        try:
            for sql in (total_sql, first_row_sql):
                cursor.execute(f"EXPLAIN {sql}")
                plan = "\n".join(row[0] for row in cursor.fetchall())
                assert re.search(r"Index Only Scan (Backward )?using attemptlog_attempt_lines", plan), plan
        finally:
            cursor.execute("RESET enable_seqscan; RESET enable_bitmapscan")


@pytest.mark.postgres
def test_the_log_table_is_vacuumed_after_every_ten_thousand_rows():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'scheduler_attemptlog'")
        options = set(cursor.fetchone()[0] or [])
    assert {"autovacuum_vacuum_insert_threshold=10000", "autovacuum_vacuum_insert_scale_factor=0"} <= options

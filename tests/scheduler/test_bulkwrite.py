"""scheduler.bulkwrite: one UPDATE or INSERT for many rows, each its own values (an UPDATE where a condition holds)."""

from __future__ import annotations

import pytest

from cluster.models import Gpu
from scheduler import bulkwrite
from scheduler.models import Job, JobState
from tests.support.live_helpers import make_node, make_user, submit


@pytest.mark.django_db
@pytest.mark.parametrize("set_based", [True, False])
def test_update_each_writes_each_row_its_values_where_the_condition_holds(set_based: bool) -> None:
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(4)]
    Job.objects.filter(pk=jobs[3].pk).update(state=JobState.CANCELLED)
    rows = {jobs[0].pk: ("Resources", "one"), jobs[1].pk: ("Priority", "two"),
            jobs[2].pk: ("Resources", "one"), jobs[3].pk: ("Resources", "not pending")}
    changed = bulkwrite.update_each(Job, ["pending_reason", "pending_message"], rows,
                                    where={"state": JobState.PENDING}, set_based=set_based)
    assert changed == 3
    stored = dict(Job.objects.values_list("pk", "pending_message"))
    assert [stored[j.pk] for j in jobs] == ["one", "two", "one", ""]


@pytest.mark.django_db
@pytest.mark.parametrize("set_based", [True, False])
def test_update_each_sets_foreign_keys_and_matches_null(set_based: bool) -> None:
    alice = make_user("alice")
    job, other = submit(alice, "a"), submit(alice, "b")
    node = make_node("n1", 3)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    Gpu.objects.filter(pk=gpus[2].pk).update(allocated_to=other)
    changed = bulkwrite.update_each(Gpu, ["allocated_to"], {g.pk: (job.pk,) for g in gpus},
                                    where={"allocated_to": None}, set_based=set_based)
    assert changed == 2
    assert list(Gpu.objects.filter(node=node).order_by("index").values_list("allocated_to", flat=True)) == [
        job.pk, job.pk, other.pk]


@pytest.mark.django_db
def test_update_each_refuses_rows_with_the_wrong_number_of_values() -> None:
    with pytest.raises(ValueError, match="row 7: 1 values for 2 fields"):
        bulkwrite.update_each(Job, ["pending_reason", "pending_message"], {7: ("Resources",)})
    assert bulkwrite.update_each(Job, ["pending_reason"], {}) == 0


@pytest.mark.django_db
@pytest.mark.parametrize("set_based", [True, False])
def test_update_each_writes_aware_times_and_text_that_json_must_escape(set_based: bool) -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from scheduler.models import Attempt

    job = submit(make_user("alice"), "a")
    attempt = Attempt.objects.create(job=job, number=1)
    at = datetime(2026, 3, 1, 12, 30, 15, 250000, tzinfo=timezone(timedelta(hours=9)))
    assert bulkwrite.update_each(Attempt, ["notice_at", "message"],
                                 {attempt.pk: (at, 'quote " backslash \\ newline \n é')}, set_based=set_based) == 1
    attempt.refresh_from_db()
    assert attempt.notice_at == at.astimezone(UTC)
    assert attempt.message == 'quote " backslash \\ newline \n é'


@pytest.mark.django_db
def test_update_each_refuses_a_naive_time_and_writes_nothing() -> None:
    from datetime import datetime

    from scheduler.models import Attempt

    attempt = Attempt.objects.create(job=submit(make_user("alice"), "a"), number=1)
    with pytest.raises(ValueError, match="naive datetime"):
        bulkwrite.update_each(Attempt, ["notice_at"], {attempt.pk: (datetime(2026, 3, 1),)}, set_based=True)
    attempt.refresh_from_db()
    assert attempt.notice_at is None


@pytest.mark.django_db
def test_insert_objects_stores_every_column_and_gives_keys_in_order() -> None:
    from datetime import UTC, datetime

    from scheduler.models import Attempt, JobEvent

    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    at = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    events = [JobEvent(job=j, at=at, from_state="PENDING", to_state="STARTING", reason="Scheduled",
                       message=f"on node {i}") for i, j in enumerate(reversed(jobs))]
    bulkwrite.insert_objects(events)
    assert all(e.pk is not None and not e._state.adding for e in events)
    stored = {e.pk: (e.job_id, e.message) for e in JobEvent.objects.filter(reason="Scheduled")}
    assert [stored[e.pk] for e in events] == [(j.pk, f"on node {i}") for i, j in enumerate(reversed(jobs))]

    attempts = [Attempt(job=j, number=1, gpu_allocation={"n1": [i, i + 1]}, started_at=at) for i, j in enumerate(jobs)]
    bulkwrite.insert_objects(attempts)
    for made in attempts:
        row = Attempt.objects.get(pk=made.pk)
        assert (row.job_id, row.gpu_allocation, row.started_at, row.state, row.grad_accum_steps, row.checkpointed) == (
            made.job_id, made.gpu_allocation, at, "STARTING", 1, None)


@pytest.mark.django_db
def test_insert_rows_refuses_a_short_row_and_inserts_nothing() -> None:
    from scheduler.models import JobEvent

    job = submit(make_user("alice"), "a")
    before = JobEvent.objects.count()
    with pytest.raises(ValueError, match="row 1: 1 values for 2 fields"):
        bulkwrite.insert_rows(JobEvent, ["job", "to_state"], [(job.pk, "PENDING"), (job.pk,)])
    assert JobEvent.objects.count() == before
    assert bulkwrite.insert_rows(JobEvent, ["job"], []) == []


@pytest.mark.django_db
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), 2.5])
def test_update_each_writes_floats_json_has_no_number_for(value: float) -> None:
    from scheduler.models import Attempt

    attempt = Attempt.objects.create(job=submit(make_user("alice"), "a"), number=1)
    assert bulkwrite.update_each(Attempt, ["lost_gpu_seconds"], {attempt.pk: (value,)}, set_based=True) == 1
    attempt.refresh_from_db()
    assert attempt.lost_gpu_seconds == value


@pytest.mark.django_db
def test_update_each_writes_nan() -> None:
    import math

    from scheduler.models import Attempt

    attempt = Attempt.objects.create(job=submit(make_user("alice"), "a"), number=1)
    assert bulkwrite.update_each(Attempt, ["lost_gpu_seconds"], {attempt.pk: (math.nan,)}, set_based=True) == 1
    attempt.refresh_from_db()
    assert math.isnan(attempt.lost_gpu_seconds)


@pytest.mark.django_db
def test_id_set_selects_the_rows_of_its_ids_with_one_parameter_for_all(django_assert_num_queries) -> None:
    from django.db import connection

    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(5)]
    wanted = [jobs[4].pk, jobs[1].pk, jobs[1].pk, 10**12]  # any order, repeats, an id of no row
    query = Job.objects.filter(pk__in=bulkwrite.id_set(wanted)).order_by("pk")
    assert list(query.values_list("pk", flat=True)) == [jobs[1].pk, jobs[4].pk]
    assert not Job.objects.filter(pk__in=bulkwrite.id_set([])).exists()
    _, params = query.query.sql_with_params()
    assert params == ((wanted,) if connection.vendor == "postgresql" else tuple(wanted))


@pytest.mark.django_db
def test_update_each_at_version_writes_only_rows_still_at_their_version_and_gives_the_new_ones() -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("row versions are PostgreSQL's")
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]

    def versions() -> dict[int, str]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id, {bulkwrite.ROW_VERSION} FROM scheduler_job AS t")
            return dict(cursor.fetchall())

    read = versions()
    Job.objects.filter(pk=jobs[1].pk).update(priority=3)  # written since the read
    rows = {j.pk: ("Resources", f"m{i}") for i, j in enumerate(jobs)}
    written = bulkwrite.update_each_at_version(Job, ["pending_reason", "pending_message"], rows,
                                               {pk: read[pk] for pk in (jobs[0].pk, jobs[1].pk)},
                                               where={"state": JobState.PENDING})
    assert set(written) == {jobs[0].pk}  # jobs[1] changed since, jobs[2] has no version given
    assert written[jobs[0].pk] == versions()[jobs[0].pk] != read[jobs[0].pk]
    stored = dict(Job.objects.values_list("pk", "pending_message"))
    assert [stored[j.pk] for j in jobs] == ["m0", "", ""]

"""The job id sequence catches up with the ids node agents name, as after a restore without advance_job_ids."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler import job_ids
from scheduler.models import Job
from tests.support.live_helpers import make_user, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def fresh_process():
    job_ids.forget_read_value()
    yield
    job_ids.forget_read_value()


def _restore_sequence_to(value: int) -> None:
    """What pg_restore of an older backup leaves: the sequence back at the backup's last id."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [Job._meta.db_table, value])


def _forgotten_jobs(owner, count: int) -> tuple[int, list[int]]:
    """Jobs submitted after a 'backup', then deleted as the restore forgets them: (backup's last id, their ids)."""
    last_backed_up = submit(owner, name="backed-up").pk
    later = [submit(owner, name=f"later{i}").pk for i in range(count)]
    Job.objects.filter(pk__in=later).delete()
    _restore_sequence_to(last_backed_up)
    return last_backed_up, later


def test_an_id_the_database_has_not_issued_moves_the_sequence_past_it(caplog) -> None:
    owner = make_user("restorer")
    backed_up, forgotten = _forgotten_jobs(owner, 3)
    assert submit(owner, name="would-collide").pk == forgotten[0]  # the hazard itself, without catching up
    Job.objects.filter(name="would-collide").delete()
    _restore_sequence_to(backed_up)
    with caplog.at_level(logging.ERROR, logger="scheduler.job_ids"):
        target = job_ids.catch_up(max(forgotten), "node-a", gap=1000)
    assert target == max(forgotten) + 1000
    new = submit(owner, name="after").pk
    assert new > max(forgotten) + 999
    assert "node-a names job id" in caplog.text and "advance_job_ids" in caplog.text


def test_an_issued_id_moves_nothing_and_a_second_report_reads_nothing() -> None:
    owner = make_user("steady")
    first = submit(owner, name="first").pk
    clock = Clock()
    assert job_ids.catch_up(first, "node-a", clock=clock) is None
    with CaptureQueriesContext(connection) as queries:
        assert job_ids.catch_up(first, "node-b", clock=clock) is None
    assert len(queries) == 0
    assert submit(owner, name="next").pk == first + 1


def test_a_value_read_is_trusted_only_for_a_while() -> None:
    """A restore under a running worker lowers the sequence below what it read: it notices once the value expires."""
    owner = make_user("underneath")
    clock = Clock()
    backed_up = submit(owner, name="backed-up").pk
    later = submit(owner, name="later").pk
    assert job_ids.catch_up(later, "node-a", clock=clock) is None  # reads the value before the 'restore'
    Job.objects.filter(pk=later).delete()
    _restore_sequence_to(backed_up)
    assert job_ids.catch_up(later, "node-a", clock=clock) is None  # still trusted
    clock.now += job_ids.TRUST_SECONDS
    assert job_ids.catch_up(later, "node-a", gap=50, clock=clock) == later + 50
    assert submit(owner, name="after").pk == later + 51


def test_an_id_far_beyond_the_sequence_is_not_believed(caplog) -> None:
    owner = make_user("hostile")
    first = submit(owner, name="first").pk
    with caplog.at_level(logging.ERROR, logger="scheduler.job_ids"):
        assert job_ids.catch_up(first + job_ids.MAX_AHEAD + 1, "node-x") is None
    assert "not believed" in caplog.text
    assert submit(owner, name="next").pk == first + 1


def test_a_caught_up_sequence_is_not_moved_again_by_another_report_of_the_same_id() -> None:
    owner = make_user("twice")
    _, forgotten = _forgotten_jobs(owner, 1)
    assert job_ids.catch_up(forgotten[0], "node-a", gap=100) == forgotten[0] + 100
    job_ids.forget_read_value()  # as another worker process would see it
    assert job_ids.catch_up(forgotten[0], "node-b", gap=100) is None
    assert submit(owner, name="after").pk == forgotten[0] + 101

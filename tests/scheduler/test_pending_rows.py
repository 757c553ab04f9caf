"""Pending rows kept between cycles: read again exactly when the row (or its project) changed.

Every test runs in one transaction, so it also shows that two versions written by one
transaction are told apart (the tuple's place, not only the transaction that wrote it).
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler import snapshot
from scheduler.models import Job, JobState, Membership, Project
from scheduler.pending_rows import PENDING_ROWS
from tests.support.live_helpers import make_node, make_user, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _empty_kept_rows():
    PENDING_ROWS.clear()
    yield
    PENDING_ROWS.clear()


def _pending() -> dict[str, object]:
    return {p.spec.id: p for p in snapshot.build(timezone.now()).snapshot.pending}


def _read_on_build() -> int:
    before = PENDING_ROWS.reads
    snapshot.build(timezone.now())
    return PENDING_ROWS.reads - before


def test_unchanged_rows_are_not_read_again_and_their_specs_are_reused() -> None:
    make_node("n1", 4)
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    first = _pending()
    assert _read_on_build() == 0
    second = _pending()
    assert list(second) == [str(j.pk) for j in jobs]
    assert all(second[k].spec is first[k].spec for k in first)


def test_a_row_updated_twice_in_one_transaction_is_read_at_its_last_version() -> None:
    make_node("n1", 4)
    alice = make_user("alice")
    job = submit(alice, "j", priority=0)
    assert _pending()[str(job.pk)].spec.priority == 0
    Job.objects.filter(pk=job.pk).update(priority=5)
    assert _pending()[str(job.pk)].spec.priority == 5
    Job.objects.filter(pk=job.pk).update(priority=7, pending_reason="Resources", pending_message="m")
    cycle = snapshot.build(timezone.now())
    assert cycle.snapshot.pending[0].spec.priority == 7
    assert (cycle.jobs[str(job.pk)].pending_reason, cycle.jobs[str(job.pk)].pending_message) == ("Resources", "m")


def test_only_the_changed_row_is_read_again() -> None:
    make_node("n1", 4)
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(4)]
    _pending()
    Job.objects.filter(pk=jobs[2].pk).update(num_gpus=2)
    before = PENDING_ROWS.reads
    pending = _pending()
    assert PENDING_ROWS.reads - before == 1
    assert pending[str(jobs[2].pk)].spec.num_gpus == 2


def test_a_renamed_project_renames_the_tenant_of_its_kept_jobs() -> None:
    make_node("n1", 4)
    alice = make_user("alice")
    project = Project.objects.create(name="vision", share=1)
    Membership.objects.create(project=project, user=alice, is_default=True)
    job = submit(alice, "j")
    assert _pending()[str(job.pk)].spec.tenant == "vision"
    Project.objects.filter(pk=project.pk).update(name="perception")
    assert _pending()[str(job.pk)].spec.tenant == "perception"


def test_jobs_that_leave_pending_are_dropped_and_new_ones_come_in_submission_order() -> None:
    make_node("n1", 4)
    alice = make_user("alice")
    a, b = submit(alice, "a"), submit(alice, "b")
    _pending()
    Job.objects.filter(pk=a.pk).update(state=JobState.CANCELLED)
    c = submit(alice, "c")
    assert list(_pending()) == [str(b.pk), str(c.pk)]
    Job.objects.filter(pk=a.pk).update(state=JobState.PENDING)  # requeued: read again
    assert list(_pending()) == [str(a.pk), str(b.pk), str(c.pk)]


def test_a_snapshot_from_kept_rows_equals_one_read_whole() -> None:
    make_node("n1", 4)
    alice = make_user("alice")
    for i in range(6):
        submit(alice, f"j{i}", job_class="TE" if i % 2 else "BE", num_gpus=1 + i % 3, priority=i)
    _pending()
    Job.objects.filter(name="j3").update(priority=-1)
    kept = snapshot.build(timezone.now())
    PENDING_ROWS.clear()
    whole = snapshot.build(timezone.now())
    assert kept.snapshot.pending == whole.snapshot.pending
    assert kept.jobs == whole.jobs

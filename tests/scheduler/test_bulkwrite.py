"""scheduler.bulkwrite.update_each: one UPDATE for many rows, each its own values, where a condition holds."""

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

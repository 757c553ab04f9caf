"""Holding and releasing waiting jobs: who may, what the job's row and timeline say, and that the
scheduling cycle keeps a held job back on free GPUs and starts it once released."""

from __future__ import annotations

import pytest

from scheduler import holds, loop
from scheduler.models import Job, JobEvent, JobHold, JobState
from scheduler.services import JobRequest, submit_jobs
from tests.support.live_helpers import run_cycle, submit

pytestmark = pytest.mark.django_db


def events(job: Job) -> list[tuple[str, str, str]]:
    return list(JobEvent.objects.filter(job=job, from_state=JobState.PENDING, to_state=JobState.PENDING)
                .order_by("id").values_list("reason", "message", "to_state"))


def test_the_owner_holds_a_waiting_job_and_its_row_and_timeline_say_so(alice) -> None:
    job = submit(alice, "wait")
    held = holds.hold_job(job, alice)
    job.refresh_from_db()
    assert (held.hold, job.hold, job.state) == (JobHold.USER, JobHold.USER, JobState.PENDING)
    assert job.pending_reason == "JobHeldUser"
    assert f"gpusched release {job.pk}" in job.pending_message
    assert events(job) == [("JobHeldUser", "held by alice", "PENDING")]
    assert holds.hold_job(job, alice).hold == JobHold.USER  # again: nothing changes, no second event
    assert len(events(job)) == 1


def test_a_job_that_is_not_waiting_cannot_be_held_and_nothing_changes(alice) -> None:
    job = submit(alice, "ran")
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    with pytest.raises(holds.HoldRefused, match=f"job {job.pk} is RUNNING: only a PENDING job can be held") as caught:
        holds.hold_job(job, alice)
    assert caught.value.conflict
    job.refresh_from_db()
    assert job.hold == "" and events(job) == []
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    with pytest.raises(holds.HoldRefused, match="it has ended"):
        holds.release_job(job, alice)


def test_an_administrator_s_hold_is_released_by_staff_only(alice, staff) -> None:
    job = submit(alice, "theirs")
    assert holds.hold_job(job, staff).hold == JobHold.ADMIN
    job.refresh_from_db()
    assert job.pending_reason == "JobHeldAdmin"
    for change in (holds.release_job, holds.hold_job):  # the owner can neither release it nor make it their own
        with pytest.raises(holds.HoldRefused, match="held by an administrator") as caught:
            change(job, alice)
        assert not caught.value.conflict
    job.refresh_from_db()
    assert job.hold == JobHold.ADMIN
    assert holds.release_job(job, staff).hold == ""
    assert [(reason, message) for reason, message, _ in events(job)] == [
        ("JobHeldAdmin", "held by admin1"), ("Released", "released by admin1")]


def test_staff_holding_their_own_job_place_a_user_hold(staff) -> None:
    job = submit(staff, "mine")
    assert holds.hold_job(job, staff).hold == JobHold.USER


def test_releasing_a_job_not_held_changes_nothing(alice) -> None:
    job = submit(alice, "free")
    assert holds.release_job(job, alice).hold == ""
    assert events(job) == []


def test_an_array_s_id_holds_each_of_its_waiting_tasks(alice) -> None:
    tasks = submit_jobs(alice, [JobRequest(name=f"t{i}", command="python train.py", num_gpus=1) for i in range(3)])
    Job.objects.filter(pk=tasks[2].pk).update(state=JobState.RUNNING)  # a task that runs: passed over
    head = Job.objects.get(pk=tasks[0].pk)
    changed = holds.for_array(head, alice, holds.hold_job)
    assert [j.pk for j in changed] == [tasks[0].pk, tasks[1].pk]
    assert dict(Job.objects.filter(array_id=head.pk).values_list("pk", "hold")) == {
        tasks[0].pk: "user", tasks[1].pk: "user", tasks[2].pk: ""}
    holds.for_array(head, alice, holds.release_job)
    assert set(Job.objects.filter(array_id=head.pk).values_list("hold", flat=True)) == {""}


def test_a_held_job_stays_back_on_free_gpus_keeps_its_reason_and_starts_once_released(
    alice, nodes, sent, django_capture_on_commit_callbacks
) -> None:
    nodes(("n1", 2))
    held, other = submit(alice, "held"), submit(alice, "other")
    holds.hold_job(held, alice)
    report = run_cycle(django_capture_on_commit_callbacks)
    assert report.applied.started == [other.pk]  # the GPU beside it is free, and the held job stays
    held.refresh_from_db()
    assert (held.state, held.pending_reason) == (JobState.PENDING, "JobHeldUser")
    assert f"gpusched release {held.pk}" in held.pending_message
    run_cycle(django_capture_on_commit_callbacks)  # a later cycle (its row kept) still holds it back
    held.refresh_from_db()
    assert held.state == JobState.PENDING
    holds.release_job(held, alice)
    report = run_cycle(django_capture_on_commit_callbacks)
    assert report.applied.started == [held.pk]
    assert {kw["job_id"] for _, kw in sent.launches} == {held.pk, other.pk}


def test_a_hold_placed_after_the_cycle_read_the_rows_stops_that_cycle_s_start(
    alice, nodes, sent, django_capture_on_commit_callbacks
) -> None:
    from django.db import transaction
    from django.utils import timezone

    from scheduler import apply, snapshot

    nodes(("n1", 2))
    late, other = submit(alice, "late"), submit(alice, "other")
    now = timezone.now()
    read = snapshot.build(now)
    decisions = loop.current_policy().decide(read.snapshot, now.timestamp())
    assert {d.job_id for d in decisions if type(d).__name__ == "Start"} == {str(late.pk), str(other.pk)}
    holds.hold_job(late, alice)  # between the read and the apply, as a request beside the loop would
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        applied = apply.apply_decisions(decisions, read)
    assert applied.started == [other.pk]
    assert (str(late.pk), "held since the cycle read it") in applied.skipped
    late.refresh_from_db()
    assert (late.state, late.hold, late.attempt_count) == (JobState.PENDING, JobHold.USER, 0)
    assert {kw["job_id"] for _, kw in sent.launches} == {other.pk}

"""Job rows kept between cycles: read again exactly when the row (its project's, its attempt's) changed.

Every test runs in one transaction, so it also shows that two versions written by one
transaction are told apart (the tuple's place, not only the transaction that wrote it).
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler import loop, snapshot
from scheduler.models import Attempt, Job, JobState, Membership, Project
from scheduler.kept_rows import ACTIVE_ROWS, PENDING_ROWS
from tests.support.live_helpers import make_node, make_user, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _empty_kept_rows():
    PENDING_ROWS.clear(), ACTIVE_ROWS.clear()
    yield
    PENDING_ROWS.clear(), ACTIVE_ROWS.clear()


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


def test_reasons_a_cycle_writes_are_kept_and_not_read_again(sent, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    make_node("n1", 1)
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(4)]
    with django_capture_on_commit_callbacks(execute=True):
        report = loop.run_cycle()
    assert report.applied.pend_updates == 3  # one starts, three wait for its GPU
    Job.objects.filter(pk=jobs[3].pk).update(priority=4)  # changed by someone else: read again
    before = PENDING_ROWS.reads
    kept = snapshot.build(timezone.now())
    assert PENDING_ROWS.reads - before == 1
    assert {p.spec.id: (kept.jobs[p.spec.id].pending_reason, kept.jobs[p.spec.id].pending_message)
            for p in kept.snapshot.pending} == {
        str(j.pk): tuple(Job.objects.filter(pk=j.pk).values_list("pending_reason", "pending_message").get())
        for j in jobs[1:]}
    with django_capture_on_commit_callbacks(execute=True):
        assert loop.run_cycle().applied.pend_updates == 0
    PENDING_ROWS.clear()
    whole = snapshot.build(timezone.now())
    assert kept.snapshot.pending == whole.snapshot.pending and kept.jobs == whole.jobs


def test_a_row_written_by_someone_else_after_it_was_read_is_not_kept_at_the_reason_written() -> None:
    from scheduler import pending_reasons

    make_node("n1", 4)
    alice = make_user("alice")
    job = submit(alice, "j")
    _pending()
    Job.objects.filter(pk=job.pk).update(priority=9)  # after the read, before the reasons are written
    assert pending_reasons.write_pends({job.pk: ("Resources", "waits")}) == 1
    cycle = snapshot.build(timezone.now())
    assert cycle.snapshot.pending[0].spec.priority == 9  # read again: the kept row had the old priority
    assert (cycle.jobs[str(job.pk)].pending_reason, cycle.jobs[str(job.pk)].pending_message) == ("Resources", "waits")


# --- jobs holding GPUs ------------------------------------------------------------------------


def _running_jobs(now=None) -> dict[str, object]:  # noqa: ANN001
    return {r.spec.id: r for r in snapshot.build(now or timezone.now()).snapshot.running}


@pytest.fixture
def four_running(sent, django_capture_on_commit_callbacks):  # noqa: ANN001, ANN201
    make_node("n1", 4)
    alice = make_user("alice")
    jobs = [submit(alice, f"r{i}") for i in range(4)]
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(loop.run_cycle().applied.started) == sorted(j.pk for j in jobs)
    return jobs


def test_running_jobs_keep_their_spec_and_placement_while_their_progress_follows_the_clock(four_running) -> None:
    before = ACTIVE_ROWS.reads
    first = _running_jobs()
    assert ACTIVE_ROWS.reads - before == 4
    later = timezone.now() + timezone.timedelta(seconds=600)
    second = _running_jobs(later)
    assert ACTIVE_ROWS.reads - before == 4
    for pk, job in first.items():
        assert second[pk].spec is job.spec and second[pk].placement is job.placement
        assert second[pk].progress == pytest.approx(job.progress + 600, abs=1.0)


def test_a_preempted_attempt_is_read_again_and_shows_vacating(four_running) -> None:
    a, b = four_running[:2]
    assert not any(r.preempting for r in _running_jobs().values())
    Job.objects.filter(pk=a.pk).update(state=JobState.PREEMPTING)
    Attempt.objects.filter(job=a).update(notice_at=timezone.now(), preempted_for=b.pk)
    before = ACTIVE_ROWS.reads
    running = _running_jobs()
    assert ACTIVE_ROWS.reads - before == 1  # the preempted one only
    assert (running[str(a.pk)].preempting, running[str(a.pk)].preempted_for) == (True, str(b.pk))
    assert running[str(b.pk)].preempting is False


def test_an_attempt_changed_alone_is_read_again(four_running) -> None:
    a = four_running[0]
    _running_jobs()
    held = Attempt.objects.get(job=a).gpu_allocation
    Attempt.objects.filter(job=a).update(gpu_allocation={"n1": held["n1"], "n2": []})
    cycle = snapshot.build(timezone.now())
    assert cycle.jobs[str(a.pk)].allocation == {"n1": held["n1"], "n2": []}


def test_running_jobs_from_kept_rows_equal_those_read_whole(four_running) -> None:
    a = four_running[0]
    now = timezone.now()
    snapshot.build(now)
    Job.objects.filter(pk=a.pk).update(progress_seconds=120)
    kept = snapshot.build(now)
    ACTIVE_ROWS.clear()
    whole = snapshot.build(now)
    assert kept.snapshot.running == whole.snapshot.running and kept.jobs == whole.jobs
    assert {r.spec.id: r.progress >= 120 for r in kept.snapshot.running}[str(a.pk)]


def test_rows_kept_longer_than_their_age_limit_are_read_again_whole(monkeypatch) -> None:
    make_node("n1", 4)
    alice = make_user("alice")
    for i in range(3):
        submit(alice, f"j{i}")
    _pending()
    assert _read_on_build() == 0
    monkeypatch.setattr("scheduler.kept_rows.MAX_AGE_S", 0.0)
    assert _read_on_build() == 3

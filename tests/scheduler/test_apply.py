"""The set-based apply step: a decision whose rows changed since the snapshot is skipped whole,
the others of the cycle still apply, and a cycle costs the same statements however many decisions."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cluster import protocol
from cluster.models import Gpu
from scheduler import apply, loop, snapshot, transitions
from scheduler.core.decisions import Pend, Preempt, Reason, Start
from scheduler.core.model import Placement
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState
from tests.support.live_helpers import allocation_problems, make_node, make_user, submit


def _start(job: Job, parts: dict[str, int]) -> Start:
    return Start(str(job.pk), Placement.of(parts))


def _apply(decisions: list, cycle: snapshot.CycleInput, capture) -> apply.Applied:  # noqa: ANN001
    with capture(execute=True), transaction.atomic():
        return apply.apply_decisions(decisions, cycle)


def _never_started(job: Job) -> None:
    job.refresh_from_db()
    assert (job.state, job.attempt_count) == (JobState.PENDING, 0)
    assert not Attempt.objects.filter(job=job).exists()
    assert not JobEvent.objects.filter(job=job, to_state=JobState.STARTING).exists()
    assert not Gpu.objects.filter(allocated_to=job).exists()


@pytest.mark.django_db
def test_a_start_whose_gpu_was_taken_is_skipped_whole_and_claims_nothing_elsewhere(
        sent, django_capture_on_commit_callbacks) -> None:
    for name in ("n1", "n2", "n3"):
        make_node(name, 1)
    alice = make_user("alice")
    intruder, wide, other = submit(alice, "intruder"), submit(alice, "wide", num_gpus=2), submit(alice, "other")
    Job.objects.filter(pk=intruder.pk).update(state=JobState.CANCELLED)
    cycle = snapshot.build(timezone.now())
    Gpu.objects.filter(node__name="n2").update(allocated_to=intruder)  # a concurrent writer, after the snapshot

    applied = _apply([_start(wide, {"n1": 1, "n2": 1}), _start(other, {"n3": 1})], cycle,
                     django_capture_on_commit_callbacks)

    assert applied.started == [other.pk]
    assert applied.skipped == [(str(wide.pk), "n2 has 0 free GPUs, 1 needed")]
    _never_started(wide)
    assert Gpu.objects.get(node__name="n1").allocated_to_id is None  # its GPU on the other node stays free
    assert [(node, kw["job_id"]) for node, kw in sent.launches] == [("n3", other.pk)]
    assert Attempt.objects.get(job=other).gpu_allocation == {"n3": [0]}


@pytest.mark.django_db
def test_a_preemption_whose_attempt_changed_is_skipped_and_the_others_apply(
        sent, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 2)
    alice = make_user("alice")
    first, second = submit(alice, "first"), submit(alice, "second")
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(loop.run_cycle().applied.started) == [first.pk, second.pk]
    cycle = snapshot.build(timezone.now())
    # After the snapshot, the first job's attempt 1 ends and attempt 2 starts on the same GPU.
    allocation = Attempt.objects.get(job=first).gpu_allocation
    Attempt.objects.filter(job=first).update(state=AttemptState.NODE_LOST, ended_at=timezone.now())
    Attempt.objects.create(job=first, number=2, gpu_allocation=allocation, state=AttemptState.STARTING)
    Job.objects.filter(pk=first.pk).update(attempt_count=2)
    sent.clear()

    applied = _apply([Preempt(str(first.pk), None), Preempt(str(second.pk), None)], cycle,
                     django_capture_on_commit_callbacks)

    assert applied.preempted == [second.pk]
    assert applied.skipped == [(str(first.pk), "no longer STARTING in attempt 1")]
    first.refresh_from_db()
    assert (first.state, first.preemption_count) == (JobState.STARTING, 0)
    assert not Attempt.objects.filter(job=first, notice_at__isnull=False).exists()
    assert not JobEvent.objects.filter(job=first, to_state=JobState.PREEMPTING).exists()
    assert Attempt.objects.get(job=second).notice_at is not None
    assert [kw["job_id"] for _, kw in sent.of(protocol.AGENT_PREEMPT)] == [second.pk]


@pytest.mark.django_db
def test_gpus_go_to_starts_in_the_policy_order_when_a_node_has_fewer_than_decided(
        sent, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 2)
    alice = make_user("alice")
    intruder, low, high = submit(alice, "intruder"), submit(alice, "low-id"), submit(alice, "high-id")
    Job.objects.filter(pk=intruder.pk).update(state=JobState.CANCELLED)
    cycle = snapshot.build(timezone.now())
    Gpu.objects.filter(node__name="n1", index=0).update(allocated_to=intruder)

    # The policy ranked the higher id first: it keeps the one GPU left.
    applied = _apply([_start(high, {"n1": 1}), _start(low, {"n1": 1})], cycle, django_capture_on_commit_callbacks)

    assert applied.started == [high.pk]
    assert applied.skipped == [(str(low.pk), "n1 has 0 free GPUs, 1 needed")]
    assert Attempt.objects.get(job=high).gpu_allocation == {"n1": [1]}
    _never_started(low)


@pytest.mark.django_db
def test_a_batch_the_database_rolls_back_reports_and_sends_nothing(
        sent, monkeypatch, django_capture_on_commit_callbacks) -> None:
    """The preemptions are written, then the starts' write fails (as a deadlock would): the
    savepoint undoes both, no command leaves, and every decision of the batch is reported skipped."""
    from django.db import OperationalError

    make_node("n1", 2)
    alice = make_user("alice")
    victim = submit(alice, "victim")
    with django_capture_on_commit_callbacks(execute=True):
        assert loop.run_cycle().applied.started == [victim.pk]
    waiting = submit(alice, "waiting")
    cycle = snapshot.build(timezone.now())
    real_events, calls = transitions.record_events, []

    def fail_on_the_starts(events) -> None:  # noqa: ANN001
        calls.append(len(events))
        if len(calls) == 2:
            raise OperationalError("deadlock detected")
        real_events(events)

    monkeypatch.setattr(transitions, "record_events", fail_on_the_starts)
    sent.clear()
    applied = _apply([Preempt(str(victim.pk), None), _start(waiting, {"n1": 1})], cycle,
                     django_capture_on_commit_callbacks)

    assert calls == [1, 1]  # the preemption's events were written before the failure
    assert (applied.started, applied.preempted) == ([], [])
    assert sorted(job for job, _ in applied.skipped) == sorted([str(victim.pk), str(waiting.pk)])
    assert all(why == "database: deadlock detected" for _, why in applied.skipped)
    victim.refresh_from_db()
    assert (victim.state, victim.preemption_count) == (JobState.STARTING, 0)
    assert Attempt.objects.get(job=victim).notice_at is None
    _never_started(waiting)
    assert sent.items == []


def _cycle_statements(jobs: int) -> int:
    """Statements of one apply with ``jobs`` starts, ``jobs`` preemptions and ``jobs`` new
    pending reasons (each its own message), on a fresh cluster."""
    Job.objects.all().delete()
    Gpu.objects.all().delete()
    alice = make_user(f"user-{jobs}")
    make_node(f"busy-{jobs}", jobs)
    make_node(f"free-{jobs}", jobs)
    running = [submit(alice, f"r{i}") for i in range(jobs)]
    cycle = snapshot.build(timezone.now())
    decisions = [_start(j, {f"busy-{jobs}": 1}) for j in running]
    with transaction.atomic():
        apply.apply_decisions(decisions, cycle)
    waiting = [submit(alice, f"w{i}") for i in range(2 * jobs)]
    cycle = snapshot.build(timezone.now())
    decisions = [Preempt(str(j.pk), None) for j in running]
    decisions += [_start(j, {f"free-{jobs}": 1}) for j in waiting[:jobs]]
    decisions += [Pend(str(j.pk), Reason.RESOURCES, f"message {i}") for i, j in enumerate(waiting[jobs:])]
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        applied = apply.apply_decisions(decisions, cycle)
    assert (len(applied.started), len(applied.preempted), applied.pend_updates) == (jobs, jobs, jobs)
    assert applied.skipped == [] and allocation_problems() == []
    return len(queries.captured_queries)


@pytest.mark.django_db
def test_a_cycle_costs_the_same_statements_for_two_or_twenty_decisions_of_each_kind(sent) -> None:
    assert _cycle_statements(2) == _cycle_statements(20)


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_start_waits_for_a_concurrent_claim_of_its_gpu_and_then_skips_only_that_job(sent) -> None:
    """Another transaction claims a GPU after the snapshot and commits only once the apply step
    is waiting for that row's lock: the apply step reads the committed claim and skips the job,
    while the cycle's other start goes ahead."""
    make_node("n1", 1)
    make_node("n2", 1)
    alice = make_user("alice")
    intruder, blocked, free = submit(alice, "intruder"), submit(alice, "blocked"), submit(alice, "free")
    Job.objects.filter(pk=intruder.pk).update(state=JobState.CANCELLED)
    cycle = snapshot.build(timezone.now())
    claimed, errors = threading.Event(), []

    def concurrent_writer() -> None:
        try:
            with transaction.atomic():
                Gpu.objects.filter(node__name="n1").update(allocated_to=intruder)
                claimed.set()
                deadline = time.monotonic() + 60
                while not _someone_waits_for_a_row_lock():
                    if time.monotonic() > deadline:
                        raise AssertionError("the apply step never waited for the claimed GPU's lock")
                    time.sleep(0.02)
        except Exception as exc:  # reported below
            errors.append(exc)
            claimed.set()
        finally:
            connections.close_all()

    writer = threading.Thread(target=concurrent_writer)
    writer.start()
    assert claimed.wait(60)
    with transaction.atomic():
        applied = apply.apply_decisions([_start(blocked, {"n1": 1}), _start(free, {"n2": 1})], cycle)
    writer.join(60)
    assert errors == []
    assert applied.started == [free.pk]
    assert applied.skipped == [(str(blocked.pk), "n1 has 0 free GPUs, 1 needed")]
    _never_started(blocked)
    assert Gpu.objects.get(node__name="n1").allocated_to_id == intruder.pk
    assert Attempt.objects.get(job=free).gpu_allocation == {"n2": [0]}


def _someone_waits_for_a_row_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db
def test_a_start_on_a_gpu_freed_after_the_cycles_instant_is_stamped_after_that_gpus_last_job_ended(
        sent, django_capture_on_commit_callbacks) -> None:
    from cluster import reports

    make_node("n1", 2)
    alice = make_user("alice")
    first = submit(alice, "first")
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        apply.apply_decisions([_start(first, {"n1": 1})], snapshot.build(timezone.now()))
    second = submit(alice, "second")
    at = timezone.now()  # the cycle's instant; the snapshot shows GPU 1 free, GPU 0 held by the first job
    cycle = snapshot.build(at)
    time.sleep(0.01)
    ended = timezone.now()  # the first job ends while the policy decides, freeing GPU 0
    reports.attempt_exited("n1", first.pk, 1, exit_code=0, signal=None, ended_at=ended, notice_at=None,
                           checkpointed=False, reason=None, now=ended)
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        assert apply.apply_decisions([_start(second, {"n1": 1})], cycle, at=at).started == [second.pk]

    attempt = Attempt.objects.get(job=second)
    assert attempt.gpu_allocation == {"n1": [0]}  # the lowest free index: the GPU just freed
    assert attempt.started_at >= Attempt.objects.get(job=first).ended_at == ended

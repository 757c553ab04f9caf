"""One scheduling cycle on the database: snapshot, policy, conditional apply, commands on commit."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster import protocol
from cluster.models import Gpu, NodeState
from scheduler import loop, services as job_services, snapshot
from scheduler.core.policy import make_policy
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState, Quota
from tests.support.live_helpers import allocation_problems, make_user, submit

pytestmark = pytest.mark.django_db


def cycle(capture, **kwargs):  # noqa: ANN001, ANN201
    """Run one cycle and its on-commit callbacks (the test runs inside a transaction)."""
    with capture(execute=True):
        return loop.run_cycle(**kwargs)


def test_pending_jobs_start_on_free_gpus_and_launch_after_commit(
    alice, nodes, sent, django_capture_on_commit_callbacks
) -> None:
    nodes(("n1", 2), ("n2", 2))
    small = [submit(alice, f"s{i}", time_limit=600) for i in range(3)]
    big = submit(alice, "big", num_gpus=2)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = loop.run_cycle()
    assert sent.items == []  # nothing leaves before the transaction commits
    for callback in callbacks:
        callback()

    assert sorted(report.applied.started) == sorted(j.pk for j in small)
    for job in small:
        job.refresh_from_db()
        assert job.state == JobState.STARTING and job.attempt_count == 1 and job.pending_reason == ""
        attempt = Attempt.objects.get(job=job)
        assert attempt.number == 1 and attempt.state == AttemptState.STARTING
        ((node, indices),) = attempt.gpu_allocation.items()
        assert set(Gpu.objects.filter(allocated_to=job).values_list("node__name", "index")) == {(node, indices[0])}
        assert JobEvent.objects.filter(job=job, from_state=JobState.PENDING, to_state=JobState.STARTING).count() == 1
    big.refresh_from_db()
    assert big.state == JobState.PENDING and big.pending_reason == "Resources"
    assert "needs 2 GPUs" in big.pending_message

    launches = {kw["job_id"]: (node, kw) for node, kw in sent.launches}
    assert set(launches) == {j.pk for j in small}
    for job in small:
        node, kw = launches[job.pk]
        attempt = Attempt.objects.get(job=job)
        assert kw["gpu_indices"] == attempt.gpu_allocation[node]
        assert kw["attempt"] == 1 and kw["resume"] is False and kw["command"] == "python train.py"
        assert kw["grace_period"] == 10.0 and kw["time_limit"] == 600.0
        protocol.LaunchCommand.from_kwargs(kw)  # a message the agent accepts
    assert allocation_problems() == []


def test_a_job_that_waited_through_cycles_launches_with_its_whole_command(
    alice, nodes, sent, django_capture_on_commit_callbacks
) -> None:
    # The cycle's rows leave commands out (a worker would keep up to 16 KiB per waiting job); the
    # start reads them for the jobs it launches, rows kept from earlier cycles included.
    from scheduler.models import MAX_COMMAND_LENGTH

    nodes(("n1", 1))
    first = submit(alice, "first")
    head, tail = "python train.py --config ", " && echo 'done; \"ok\"'"
    script = head + "x" * (MAX_COMMAND_LENGTH - len(head) - len(tail)) + tail  # the longest command accepted
    waiting = submit(alice, "waiting", command=script)
    cycle(django_capture_on_commit_callbacks)
    cycle(django_capture_on_commit_callbacks)  # the waiting job's row is kept from the first cycle now
    Job.objects.filter(pk=first.pk).update(state=JobState.COMPLETED)
    Gpu.objects.filter(allocated_to=first).update(allocated_to=None)
    cycle(django_capture_on_commit_callbacks)
    launches = {kw["job_id"]: kw for _, kw in sent.launches}
    assert launches[first.pk]["command"] == "python train.py"
    assert launches[waiting.pk]["command"] == script


def test_pending_reason_is_written_only_when_it_changes(alice, nodes, sent, django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 1))
    submit(alice, "first")
    second = submit(alice, "second")
    assert cycle(django_capture_on_commit_callbacks).applied.pend_updates == 1
    second.refresh_from_db()
    assert (second.pending_reason, second.state) == ("Resources", JobState.PENDING)
    assert cycle(django_capture_on_commit_callbacks).applied.pend_updates == 0


def test_a_te_job_waiting_for_its_victim_keeps_its_reason_until_the_victim_is_overdue(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    """The expected end of the wait is a time, not a countdown: later cycles leave the TE job's row as
    it is, until that time has passed (then once more, to say so)."""
    from datetime import timedelta

    from scheduler.pending_reasons import clock_text

    nodes(("n1", 1))
    victim = submit(alice, "be", grace_period=60)
    cycle(django_capture_on_commit_callbacks)
    te = submit(alice, "te", job_class="TE")
    assert cycle(django_capture_on_commit_callbacks).applied.preempted == [victim.pk]
    notice_at = Attempt.objects.get(job=victim).notice_at
    expected = f"waiting for preempted job {victim.pk} to vacate n1; expected by {clock_text(notice_at.timestamp() + 60)}"
    later = timezone.now()
    cycle(django_capture_on_commit_callbacks, now=later + timedelta(seconds=1))  # from the notice as stored
    te.refresh_from_db()
    assert (te.pending_reason, te.pending_message) == ("WaitingForPreemption", expected)
    for seconds in (5, 20, 40):  # a countdown would have changed at each
        assert cycle(django_capture_on_commit_callbacks, now=later + timedelta(seconds=seconds)).applied.pend_updates == 0
    for seconds in (61, 62, 90):  # the victim is overdue: said once
        updates = cycle(django_capture_on_commit_callbacks, now=notice_at + timedelta(seconds=seconds)).applied.pend_updates
        assert updates == (1 if seconds == 61 else 0)
    te.refresh_from_db()
    assert te.pending_message == f"waiting for preempted job {victim.pk} to vacate n1; expected any moment (grace period over)"


def test_a_quota_holds_jobs_that_fit_the_cluster(alice, nodes, sent, django_capture_on_commit_callbacks) -> None:
    """Each job alone is within max_gpus=1; together they are not: one starts, one waits QuotaExceeded."""
    nodes(("n1", 4))
    Quota.objects.create(user=alice, max_gpus=1)
    first, second = submit(alice, "a"), submit(alice, "b")
    report = cycle(django_capture_on_commit_callbacks)
    assert report.applied.started == [first.pk]
    second.refresh_from_db()
    assert second.state == JobState.PENDING and second.pending_reason == "QuotaExceeded"
    assert "holds 1 of 1 GPUs" in second.pending_message
    # The next cycle sees the held GPU in the usage and keeps the job held.
    assert cycle(django_capture_on_commit_callbacks).applied.started == []
    bob = make_user("bob")
    other = submit(bob, "c")
    assert cycle(django_capture_on_commit_callbacks).applied.started == [other.pk]


def test_te_job_preempts_a_victim_once_and_starts_when_it_vacates(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    from cluster import reports

    nodes(("n1", 2))
    short_grace = submit(alice, "be-short", grace_period=2)
    long_grace = submit(alice, "be-long", grace_period=300)
    cycle(django_capture_on_commit_callbacks)
    te = submit(alice, "te", job_class="TE")
    sent.clear()

    report = cycle(django_capture_on_commit_callbacks)
    assert report.applied.preempted == [short_grace.pk]  # fitgpp: the shortest wait for the TE job
    short_grace.refresh_from_db()
    assert short_grace.state == JobState.PREEMPTING and short_grace.preemption_count == 1
    attempt = Attempt.objects.get(job=short_grace)
    assert attempt.notice_at is not None and attempt.preempted_for == te.pk
    ((node, kw),) = sent.of(protocol.AGENT_PREEMPT)
    assert kw == {"job_id": short_grace.pk, "attempt": 1, "grace_period": 2.0} and node == "n1"
    te.refresh_from_db()
    assert te.pending_reason == "WaitingForPreemption"

    sent.clear()
    assert cycle(django_capture_on_commit_callbacks).applied.preempted == []  # promised GPUs are counted
    assert sent.items == []

    with django_capture_on_commit_callbacks(execute=True):
        reports.attempt_exited(
            "n1", short_grace.pk, 1, exit_code=143, signal=None, ended_at=timezone.now(), notice_at=None,
            checkpointed=True, reason=protocol.EXIT_PREEMPT, now=timezone.now(),
        )
    report = cycle(django_capture_on_commit_callbacks)
    assert report.applied.started == [te.pk]
    te_attempt = Attempt.objects.get(job=te)
    assert te_attempt.gpu_allocation == attempt.gpu_allocation  # the victim's GPU
    short_grace.refresh_from_db()
    assert short_grace.state == JobState.PENDING and short_grace.attempt_count == 1
    long_grace.refresh_from_db()
    assert long_grace.state == JobState.STARTING
    assert allocation_problems() == []

    # When a GPU frees up, the victim resumes as attempt 2 with RESUME=1.
    Job.objects.filter(pk=long_grace.pk).update(state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        reports.attempt_exited("n1", long_grace.pk, 1, exit_code=0, signal=None, ended_at=timezone.now(),
                                notice_at=None, checkpointed=False, reason=None, now=timezone.now())
    sent.clear()
    assert cycle(django_capture_on_commit_callbacks).applied.started == [short_grace.pk]
    ((_, kw),) = sent.launches
    assert kw["attempt"] == 2 and kw["resume"] is True


def test_cancelling_jobs_get_one_kill(alice, nodes, sent, django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 1))
    job = submit(alice, "x", grace_period=7)
    cycle(django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        job_services.cancel_job(job, alice)
    sent.clear()
    report = cycle(django_capture_on_commit_callbacks)
    assert report.applied.cancel_kills == [job.pk]
    assert sent.of(protocol.AGENT_KILL) == [
        ("n1", {"job_id": job.pk, "attempt": 1, "grace_period": 7.0, "reason": protocol.EXIT_CANCEL})
    ]
    assert Attempt.objects.get(job=job).notice_at is not None
    sent.clear()
    assert cycle(django_capture_on_commit_callbacks).applied.cancel_kills == []
    assert sent.items == []


def test_only_up_nodes_are_used(alice, nodes, sent, django_capture_on_commit_callbacks) -> None:
    draining, up = nodes(("a-drain", 2), ("b-up", 1))
    draining.state = NodeState.DRAINING
    draining.save()
    jobs = [submit(alice, f"j{i}") for i in range(2)]
    report = cycle(django_capture_on_commit_callbacks)
    assert report.applied.started == [jobs[0].pk]
    assert list(Attempt.objects.get(job=jobs[0]).gpu_allocation) == ["b-up"]


def test_a_decision_about_a_job_that_changed_meanwhile_writes_nothing(alice, nodes, sent) -> None:
    """The job is cancelled between the snapshot and the apply: its Start matches no row."""
    from django.db import transaction

    from scheduler import apply

    nodes(("n1", 1))
    job = submit(alice, "x")
    cycle_input = snapshot.build(timezone.now())
    decisions = make_policy("fifo").decide(cycle_input.snapshot, cycle_input.now.timestamp())
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    with transaction.atomic():
        applied = apply.apply_decisions(decisions, cycle_input)
    assert applied.started == [] and applied.skipped[0][0] == str(job.pk)
    assert not Attempt.objects.exists() and not Gpu.objects.filter(allocated_to__isnull=False).exists()


def test_a_gpu_taken_behind_the_snapshot_rolls_back_only_that_start(alice, nodes, sent) -> None:
    from django.db import transaction

    from scheduler import apply

    n1, n2 = nodes(("n1", 1), ("n2", 1))
    intruder, first, second = submit(alice, "intruder"), submit(alice, "first"), submit(alice, "second")
    Job.objects.filter(pk=intruder.pk).update(state=JobState.CANCELLED)
    cycle_input = snapshot.build(timezone.now())
    decisions = make_policy("fifo").decide(cycle_input.snapshot, cycle_input.now.timestamp())
    placed = {d.job_id: d.placement.nodes[0] for d in decisions if hasattr(d, "placement")}
    Gpu.objects.filter(node__name=placed[str(first.pk)]).update(allocated_to=intruder)
    with transaction.atomic():
        applied = apply.apply_decisions(decisions, cycle_input)
    assert applied.started == [second.pk]
    first.refresh_from_db()
    assert first.state == JobState.PENDING and first.attempt_count == 0
    assert not Attempt.objects.filter(job=first).exists()
    assert not JobEvent.objects.filter(job=first, to_state=JobState.STARTING).exists()


@pytest.mark.django_db(transaction=True)
def test_apply_refuses_to_run_outside_a_transaction(alice, nodes) -> None:
    from scheduler import apply

    nodes(("n1", 1))
    submit(alice)
    cycle_input = snapshot.build(timezone.now())
    with pytest.raises(RuntimeError, match="inside transaction.atomic"):
        apply.apply_decisions([], cycle_input)


def test_snapshot_reports_progress_preemptions_and_vacating_jobs(alice, nodes, sent, no_triggers,
                                                                 django_capture_on_commit_callbacks, settings) -> None:
    settings.SCHEDULER_RESUME_OVERHEAD = 5.0
    nodes(("n1", 2))
    victim = submit(alice, "victim", grace_period=1)
    other = submit(alice, "other", grace_period=100)
    cycle(django_capture_on_commit_callbacks)
    te = submit(alice, "te", job_class="TE")
    cycle(django_capture_on_commit_callbacks)
    now = timezone.now()
    Job.objects.filter(pk=victim.pk).update(progress_seconds=40.0)
    snap = snapshot.build(now).snapshot
    by_id = {r.spec.id: r for r in snap.running}
    v = by_id[str(victim.pk)]
    assert v.preempting and v.preempted_for == str(te.pk) and v.preemptions == 1 and v.notice_time is not None
    assert not by_id[str(other.pk)].preempting
    assert v.progress >= 40.0  # kept work plus the first attempt's run time (no resume overhead)
    assert [p.spec.id for p in snap.pending] == [str(te.pk)]
    assert snap.free == {"n1": (0, float("inf"), float("inf"))}


def test_a_cycle_log_lists_few_ids_whole_and_many_as_a_count_with_the_first() -> None:
    from scheduler.loop import LOGGED_IDS, listed

    assert listed([]) == "[]"
    assert listed([3, 4]) == "[3, 4]"
    many = list(range(100, 100 + LOGGED_IDS + 5))
    line = listed(many)
    assert line.startswith(f"{LOGGED_IDS + 5}: [100, 101,") and line.endswith(", ... 5 more]")
    assert str(100 + LOGGED_IDS - 1) in line and str(100 + LOGGED_IDS) not in line


def test_a_cycle_leaves_nothing_for_the_garbage_collector(
    alice, nodes, sent, no_triggers, memory_layer, django_capture_on_commit_callbacks
) -> None:
    """Every object of a cycle is freed as the cycle ends. One left in a reference cycle (a planner
    and its heap of nodes, a recursive victim search, an exception whose traceback held the cycle's
    frames) kept the whole snapshot alive until the collector walked it: half a second at 5,000 nodes."""
    import gc

    nodes(("n1", 2), ("n2", 2))
    for i in range(4):
        submit(alice, f"be{i}", grace_period=5 + i)
    cycle(django_capture_on_commit_callbacks)
    submit(alice, "te", job_class="TE", num_gpus=2)  # two victims on one node: the recursive search
    submit(alice, "waits", num_gpus=2)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        report = cycle(django_capture_on_commit_callbacks)
        gc.collect()
        left = sorted({type(o).__name__ for o in gc.garbage
                       if type(o).__module__.startswith("scheduler") or type(o).__name__ in ("frame", "traceback")})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert report.applied.preempted  # the victim planner ran
    assert left == [], sorted({type(o).__name__ for o in gc.garbage})

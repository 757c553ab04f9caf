"""Reconfiguration on the database: the apply step's writes for Reconfigure, the attempt's end,
the pinned relaunch with its plan, and the ledger kept apart from preemptions."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster import protocol
from cluster import reports
from cluster.models import Gpu
from scheduler import loop, snapshot
from scheduler.core.decisions import Decision, Reason, Reconfigure, Start
from scheduler.core.model import Placement, Snapshot
from scheduler.core.policy import make_policy
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState
from tests.support.live_helpers import allocation_problems, submit

pytestmark = pytest.mark.django_db


class Scripted:
    """A policy that returns the decisions a test gives it (the apply step is under test)."""

    def __init__(self, *decisions: Decision) -> None:
        self.decisions = list(decisions)
        self.seen: list[Snapshot] = []

    def decide(self, snap: Snapshot, now: float) -> list[Decision]:
        self.seen.append(snap)
        return self.decisions


def cycle(capture, policy):  # noqa: ANN001, ANN201
    with capture(execute=True):
        return loop.run_cycle(policy=policy)


def elastic_job(owner, **fields):  # noqa: ANN001, ANN201
    values = {"model": "bert", "plan": "ga", "allowed_plans": ("ga", "zero-dp"), "num_gpus": 2, "min_gpus": 1,
              "max_gpus": 4, "grace_period": 10, **fields}
    return submit(owner, "elastic", **values)


def run(job: Job, node: str) -> None:
    reports.attempt_started(node, job.pk, job.attempt_count, 4242, timezone.now())


def exit_on(job: Job, node: str, number: int, *, reason: str | None, code: int | None) -> str | None:
    now = timezone.now()
    return reports.attempt_exited(node, job.pk, number, exit_code=code, signal=None, ended_at=now,
                                         notice_at=None, checkpointed=True, reason=reason, now=now)


def test_reconfigure_checkpoints_then_relaunches_pinned_with_the_new_plan(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    nodes(("n1", 4))
    job = elastic_job(alice)
    jid = str(job.pk)
    report = cycle(django_capture_on_commit_callbacks, Scripted(Start(jid, Placement.of({"n1": 2}), plan="ga")))
    assert report.applied.started == [job.pk]
    ((node, kw),) = sent.launches
    assert (kw["plan"], kw["num_gpus"], kw["grad_accum_steps"], kw["requested_gpus"]) == ("ga", 2, 1, 2)
    job.refresh_from_db()
    run(job, "n1")

    sent.clear()
    shrink = Reconfigure(jid, Placement.of({"n1": 1}), "zero-dp", for_job=None, reason=Reason.SHRUNK_FOR_JOB,
                         message="shrunk for job 99")
    report = cycle(django_capture_on_commit_callbacks, Scripted(shrink))
    assert report.applied.reconfigured == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING
    assert (job.reconfiguration_count, job.preemption_count) == (1, 0)
    assert (job.target_plan, job.target_gpus, job.target_placement) == ("zero-dp", 1, {"n1": 1})
    first = Attempt.objects.get(job=job, number=1)
    assert first.notice_at is not None and first.notice_reason == "reconfigure" and first.plan == "ga"
    event = JobEvent.objects.filter(job=job).order_by("-at", "-id").first()
    assert (event.from_state, event.to_state, event.reason) == (JobState.RUNNING, JobState.PREEMPTING, "Reconfigured")
    assert event.message == "ga on 2 GPUs -> zero-dp on 1 GPU: shrunk for job 99"
    assert sent.items == [("n1", protocol.AGENT_PREEMPT, {"job_id": job.pk, "attempt": 1, "grace_period": 10.0})]
    # While it checkpoints, policies see it reconfiguring (not preempting) and holding its GPUs.
    (held,) = snapshot.build(timezone.now()).snapshot.running
    assert held.reconfiguring and not held.preempting and held.placement.num_gpus == 2

    assert exit_on(job, "n1", 1, reason=protocol.EXIT_PREEMPT, code=143) == AttemptState.RECONFIGURED
    job.refresh_from_db()
    assert (job.state, job.pending_reason) == (JobState.PENDING, "Reconfigured")
    assert "relaunching with zero-dp on 1 GPU" in job.pending_message
    assert job.preemption_count == 0 and not Gpu.objects.filter(allocated_to=job).exists()
    (pending,) = snapshot.build(timezone.now()).snapshot.pending
    assert (pending.spec.num_gpus, pending.spec.plan, pending.spec.reconfigurable) == (1, "zero-dp", False)

    # Any policy starts the pinned job as decided; the launch says plan, GPUs and accumulation.
    sent.clear()
    report = cycle(django_capture_on_commit_callbacks, make_policy("fifo"))
    assert report.applied.started == [job.pk]
    ((node, kw),) = sent.launches
    assert (kw["plan"], kw["num_gpus"], kw["grad_accum_steps"], kw["requested_gpus"], kw["resume"]) == (
        "zero-dp", 1, 2, 2, True)
    job.refresh_from_db()
    assert (job.target_plan, job.target_gpus, job.target_placement) == ("", 0, {})
    second = Attempt.objects.get(job=job, number=2)
    assert (second.plan, second.gpu_count, second.grad_accum_steps) == ("zero-dp", 1, 2)
    run(job, "n1")
    (now_running,) = snapshot.build(timezone.now()).snapshot.running
    assert (now_running.spec.num_gpus, now_running.plan, now_running.reconfigurations) == (1, "zero-dp", 1)
    assert now_running.last_reconfigure is not None and not now_running.reconfiguring
    assert allocation_problems() == []

    assert exit_on(job, "n1", 2, reason=None, code=0) == AttemptState.COMPLETED
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert list(Attempt.objects.filter(job=job).values_list("state", "plan")) == [
        (AttemptState.RECONFIGURED, "ga"), (AttemptState.COMPLETED, "zero-dp")]


def test_a_reconfigure_that_no_longer_applies_writes_nothing(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    """Outside the declared range, a plan not allowed, a job not RUNNING, a job without a model: skipped."""
    nodes(("n1", 4), ("n2", 4))
    job = elastic_job(alice)
    plain = submit(alice, "plain", num_gpus=1)
    cycle(django_capture_on_commit_callbacks, Scripted(Start(str(job.pk), Placement.of({"n1": 2}), plan="ga"),
                                                       Start(str(plain.pk), Placement.of({"n2": 1}))))
    job.refresh_from_db()
    sent.clear()
    bad = [
        Reconfigure(str(job.pk), Placement.of({"n1": 4, "n2": 1}), "ga"),  # 5 GPUs > max 4
        Reconfigure(str(plain.pk), Placement.of({"n2": 2}), ""),  # no model
    ]
    report = cycle(django_capture_on_commit_callbacks, Scripted(*bad))
    assert report.applied.reconfigured == []
    assert sorted(jid for jid, _ in report.applied.skipped) == sorted([str(job.pk), str(plain.pk)])
    run(job, "n1")
    report = cycle(django_capture_on_commit_callbacks,
                   Scripted(Reconfigure(str(job.pk), Placement.of({"n1": 2}), "zero-offload")))  # not allowed
    assert report.applied.reconfigured == [] and "not allowed" in report.applied.skipped[0][1]
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.reconfiguration_count == 0 and job.target_gpus == 0
    assert sent.items == []
    assert not Attempt.objects.filter(notice_at__isnull=False).exists()


def test_a_job_cancelled_while_it_reconfigures_ends_cancelled(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    from scheduler import services as job_services

    nodes(("n1", 4))
    job = elastic_job(alice)
    cycle(django_capture_on_commit_callbacks, Scripted(Start(str(job.pk), Placement.of({"n1": 2}), plan="ga")))
    job.refresh_from_db()
    run(job, "n1")
    cycle(django_capture_on_commit_callbacks, Scripted(Reconfigure(str(job.pk), Placement.of({"n1": 4}), "ga")))
    job_services.cancel_job(Job.objects.get(pk=job.pk), alice)
    assert exit_on(job, "n1", 1, reason=protocol.EXIT_PREEMPT, code=143) == AttemptState.RECONFIGURED
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.preemption_count == 0


# --- with the fitted performance model ------------------------------------------------------


def test_rubick_grows_a_running_job_when_gpus_free_up(
    perf_model_traces, alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    """A blocker holds one of two GPUs; the elastic job (2 GPUs asked, 1 to 2 allowed) starts on the
    other with 2 accumulation steps; when the blocker ends, Rubick grows it to both."""
    rubick = make_policy("rubick")
    nodes(("n1", 2))
    blocker = submit(alice, "blocker", num_gpus=1)
    cycle(django_capture_on_commit_callbacks, rubick)
    blocker.refresh_from_db()
    run(blocker, "n1")
    job = elastic_job(alice, allowed_plans=(), min_gpus=1, max_gpus=2)
    sent.clear()
    report = cycle(django_capture_on_commit_callbacks, rubick)
    assert report.applied.started == [job.pk]
    ((_, kw),) = sent.launches
    assert (kw["plan"], kw["num_gpus"], kw["grad_accum_steps"]) == ("ga", 1, 2)
    job.refresh_from_db()
    run(job, "n1")
    (spec,) = [r.spec for r in snapshot.build(timezone.now()).snapshot.running if r.spec.id == str(job.pk)]
    assert spec.reconfigurable and spec.throughput is not None and spec.gpu_range == (1, 2)

    exit_on(blocker, "n1", 1, reason=None, code=0)
    report = cycle(django_capture_on_commit_callbacks, rubick)
    assert report.applied.reconfigured == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.target_gpus, job.target_plan) == (JobState.PREEMPTING, 2, "ga")
    event = JobEvent.objects.get(job=job, to_state=JobState.PREEMPTING)
    assert event.reason == "Reconfigured" and event.message.startswith("ga on 1 GPU -> ga on 2 GPUs: Grown")


def test_fitgpp_shrink_makes_room_for_a_te_job_by_shrinking_instead_of_preempting(
    perf_model_traces, alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    """A reconfigurable BE job holds all 4 GPUs; a 2-GPU TE job arrives. fitgpp-shrink prices
    shrinking below preempting, so the BE job checkpoints and comes back on 2 GPUs (twice the
    accumulation steps) next to the TE job, without counting as preempted."""
    policy = make_policy("fitgpp-shrink")
    nodes(("n1", 4))
    be = elastic_job(alice, num_gpus=4, min_gpus=2, max_gpus=4)
    assert cycle(django_capture_on_commit_callbacks, policy).applied.started == [be.pk]
    be.refresh_from_db()
    run(be, "n1")

    te = submit(alice, "te", job_class="TE", num_gpus=2)
    sent.clear()
    report = cycle(django_capture_on_commit_callbacks, policy)
    assert report.applied.reconfigured == [be.pk] and report.applied.preempted == []
    be.refresh_from_db()
    assert (be.state, be.target_gpus, be.preemption_count) == (JobState.PREEMPTING, 2, 0)
    event = JobEvent.objects.get(job=be, to_state=JobState.PREEMPTING)
    assert f"shrunk for TE job {te.pk}" in event.message
    assert sent.items == [("n1", protocol.AGENT_PREEMPT, {"job_id": be.pk, "attempt": 1, "grace_period": 10.0})]
    te.refresh_from_db()
    assert te.state == JobState.PENDING

    assert exit_on(be, "n1", 1, reason=protocol.EXIT_PREEMPT, code=143) == AttemptState.RECONFIGURED
    sent.clear()
    report = cycle(django_capture_on_commit_callbacks, policy)
    assert sorted(report.applied.started) == sorted([be.pk, te.pk])
    launches = {kw["job_id"]: kw for _, kw in sent.launches}
    assert len(launches[te.pk]["gpu_indices"]) == 2
    assert (launches[be.pk]["num_gpus"], launches[be.pk]["grad_accum_steps"]) == (2, 2)
    be.refresh_from_db()
    assert (be.preemption_count, be.reconfiguration_count) == (0, 1)
    assert allocation_problems() == []


def test_reported_steps_reach_rubick_as_the_jobs_remaining_work(
    perf_model_traces, alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    """A reconfigurable job that reports step and total steps is seen with them (spec.steps,
    steps_done); after a preemption, from its latest checkpoint's step."""
    from jobprogress import services as progress

    nodes(("n1", 2))
    job = elastic_job(alice, allowed_plans=(), min_gpus=1, max_gpus=2)
    cycle(django_capture_on_commit_callbacks, make_policy("rubick"))
    job.refresh_from_db()
    run(job, "n1")
    now = timezone.now()
    progress.record_progress(job.pk, 1, {"t": now.timestamp(), "step": 300, "total_steps": 1000,
                                         "checkpoint": {"step": 250, "path": "ck"}}, now)
    (entry,) = [r for r in snapshot.build(timezone.now()).snapshot.running if r.spec.id == str(job.pk)]
    assert (entry.spec.steps, entry.steps_done) == (1000, 300.0)

    Attempt.objects.filter(job=job).update(state=AttemptState.PREEMPTED)
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING)
    (waiting,) = [p for p in snapshot.build(timezone.now()).snapshot.pending if p.spec.id == str(job.pk)]
    assert (waiting.spec.steps, waiting.steps_done) == (1000, 250.0)

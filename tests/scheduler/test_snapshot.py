"""The snapshot read from plain rows: a fixed number of queries, and what it tells the policy."""

from __future__ import annotations

import math

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cluster.models import Node
from scheduler import loop, snapshot
from scheduler.core.model import JobClass
from scheduler.models import Job, JobState
from tests.support.live_helpers import make_node, make_user, submit

pytestmark = pytest.mark.django_db


def _queries_for(jobs: int, capture) -> int:  # noqa: ANN001
    """Queries of one snapshot with ``jobs`` running and ``jobs`` pending jobs (TE and BE)."""
    Job.objects.all().delete()
    Node.objects.all().delete()
    alice = make_user(f"user-{jobs}")
    make_node(f"n-{jobs}", jobs)
    for i in range(jobs):
        submit(alice, f"r{i}")
    with capture(execute=True):
        assert len(loop.run_cycle().applied.started) == jobs
    for i in range(jobs):
        submit(alice, f"p{i}", job_class="TE" if i % 2 else "BE")
    with CaptureQueriesContext(connection) as queries:
        cycle = snapshot.build(timezone.now())
    assert (len(cycle.snapshot.running), len(cycle.snapshot.pending)) == (jobs, jobs)
    return len(queries.captured_queries)


def test_a_snapshot_costs_the_same_queries_for_two_or_twenty_jobs_of_each_kind(
        sent, django_capture_on_commit_callbacks) -> None:
    assert _queries_for(2, django_capture_on_commit_callbacks) == _queries_for(20, django_capture_on_commit_callbacks)


def test_free_capacity_counts_the_cpu_and_memory_shares_of_the_jobs_placed(
        sent, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 4, cpus=16, mem_gb=64)
    make_node("n2", 1)  # tracks neither CPUs nor memory
    alice = make_user("alice")
    job = submit(alice, "big", num_gpus=2, num_cpus=8, mem_gb=32)
    with django_capture_on_commit_callbacks(execute=True):
        assert loop.run_cycle().applied.started == [job.pk]
    assert job.attempts.get().gpu_allocation == {"n1": [0, 1]}
    te = submit(alice, "te", job_class="TE")
    snap = snapshot.build(timezone.now()).snapshot
    assert snap.free == {"n1": (2, 8.0, 32.0), "n2": (1, math.inf, math.inf)}
    assert [p.spec.id for p in snap.pending] == [str(te.pk)]
    assert snap.pending_te == snap.pending and snap.pending[0].spec.job_class is JobClass.TE
    ((running,),) = [snap.running]
    assert (running.spec.id, running.spec.num_cpus, running.spec.mem_gb) == (str(job.pk), 8.0, 32.0)


def test_the_rows_the_apply_step_writes_against_are_as_read(sent, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1)
    alice = make_user("alice")
    running, waiting = submit(alice, "runs", time_limit=60), submit(alice, "waits")
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    Job.objects.filter(pk=waiting.pk).update(pending_reason="Resources", pending_message="no GPU")
    rows = snapshot.build(timezone.now()).jobs
    ran, waits = rows[str(running.pk)], rows[str(waiting.pk)]
    assert (ran.state, ran.attempt_count, ran.time_limit, ran.allocation) == (JobState.STARTING, 1, 60, {"n1": [0]})
    assert (waits.state, waits.attempt_count, waits.pending_reason, waits.pending_message, waits.allocation) == (
        JobState.PENDING, 0, "Resources", "no GPU", {})
    assert (waits.owner_id, waits.grace_period) == (alice.pk, 10)
    assert not hasattr(waits, "command")  # read by the start step for the jobs it launches, not kept per job

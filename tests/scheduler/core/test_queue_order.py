"""Priority within a class: higher first, arrival order among equals."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Start
from scheduler.core.fairshare import TenantUsage
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.policy import make_policy
from scheduler.core.queue_order import by_priority, uniform_priority

TE, BE = JobClass.TE, JobClass.BE
QUEUE_POLICIES = ["fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp", "fitgpp-shrink"]


def pend(jid: str, gpus: int, cls: JobClass = BE, submit: float = 0.0, priority: int = 0, tenant: str = "") -> PendingJob:
    return PendingJob(JobSpec(jid, cls, gpus, submit, priority=priority, tenant=tenant))


def test_higher_priority_starts_first_in_every_queue_policy():
    # One free GPU; the job submitted last asks for priority 1000, the first for -1000.
    for name in QUEUE_POLICIES:
        for cls in (TE, BE):
            pending = [pend("low", 1, cls, 0.0, -1000), pend("mid", 1, cls, 1.0, 0), pend("high", 1, cls, 2.0, 1000)]
            snap = Snapshot([NodeCapacity("n1", 1)], [], pending)
            started = [d.job_id for d in make_policy(name).decide(snap, 10.0) if isinstance(d, Start)]
            assert started == ["high"], (name, cls, started)


def test_equal_priorities_keep_arrival_order_and_the_same_list():
    jobs = [pend(f"j{i}", 1, submit=float(i), priority=5) for i in range(4)]
    assert by_priority(jobs, uniform=True) is jobs
    assert [p.spec.id for p in by_priority(jobs, uniform=False)] == ["j0", "j1", "j2", "j3"]
    mixed = [pend("a", 1, priority=1), pend("b", 1, priority=3), pend("c", 1, priority=1), pend("d", 1, priority=3)]
    assert [p.spec.id for p in by_priority(mixed, uniform=False)] == ["b", "d", "a", "c"]


def test_uniform_priority_trusts_the_snapshot_field_and_else_scans():
    jobs = [pend("a", 1, priority=1), pend("b", 1, priority=2)]
    assert uniform_priority(Snapshot([], [], jobs)) is False
    assert uniform_priority(Snapshot([], [], jobs[:1])) is True
    assert uniform_priority(Snapshot([], [], [])) is True
    assert uniform_priority(Snapshot([], [], jobs, uniform_priority=True)) is True


def test_te_queue_is_ordered_by_priority_too():
    # The higher-priority TE job preempts; the lower one waits behind it.
    running = [RunningJob(JobSpec("be", BE, 1, 0.0), Placement.of({"n1": 1}), 0.0, 0.0)]
    pending = [pend("te-low", 1, TE, 0.0, 0), pend("te-high", 1, TE, 5.0, 7)]
    out = make_policy("fitgpp").decide(Snapshot([NodeCapacity("n1", 1)], running, pending), 100.0)
    preempts = [(d.job_id, d.for_job) for d in out if d.__class__.__name__ == "Preempt"]
    assert preempts == [("be", "te-high")]


@st.composite
def queues(draw):
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    nodes = [NodeCapacity(f"n{i}", rng.choice([1, 2, 4, 8])) for i in range(rng.randint(1, 3))]
    running = []
    used = {n.name: 0 for n in nodes}
    for i in range(rng.randint(0, 6)):
        node = rng.choice(nodes)
        g = rng.choice([1, 2])
        if used[node.name] + g <= node.gpus:
            used[node.name] += g
            cls = rng.choice([TE, BE, BE])
            spec = JobSpec(f"r{i}", cls, g, 0.0, grace_period=rng.choice([0.0, 30.0]))
            running.append(RunningJob(spec, Placement.of({node.name: g}), 0.0, 0.0))
    pending = []
    t = 0.0
    for i in range(rng.randint(1, 10)):
        t += rng.choice([0.0, 1.0, 100.0])
        spec = JobSpec(f"p{i}", rng.choice([TE, BE]), rng.choice([1, 1, 2, 4]), t,
                       priority=rng.choice([-5, 0, 0, 3, 10]), tenant=rng.choice(["a", "b"]))
        hold = "QuotaExceeded" if rng.random() < 0.1 else None
        pending.append(PendingJob(spec, hold_reason=hold))
    policy = draw(st.sampled_from(QUEUE_POLICIES))
    # Half the cases with fair share on: priority still rules within a tenant.
    tenants = {"a": TenantUsage(1.0, rng.choice([0.0, 1e5])), "b": TenantUsage(2.0, 0.0)} if rng.random() < 0.5 else None
    return policy, Snapshot(nodes, running, pending, tenants=tenants)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues())
def test_never_a_lower_priority_started_ahead_of_a_higher_one_of_the_same_class_tenant_and_fit(case):
    name, snapshot = case
    started = {d.job_id for d in make_policy(name).decide(snapshot, 1000.0) if isinstance(d, Start)}
    for low in snapshot.pending:
        if low.spec.id not in started:
            continue
        for high in snapshot.pending:
            s, h = low.spec, high.spec
            same = (h.job_class, h.tenant, h.num_gpus) == (s.job_class, s.tenant, s.num_gpus)
            if same and h.priority > s.priority and high.hold_reason is None:
                assert h.id in started, f"{name}: {s.id} (priority {s.priority}) started, {h.id} ({h.priority}) not"

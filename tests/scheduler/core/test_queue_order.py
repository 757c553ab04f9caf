"""Priority within a class: higher first, arrival order among equals."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Preempt, Start
from scheduler.core.fairshare import TenantUsage
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.policy import make_policy, policy_names
from scheduler.core import policy as policy_registry
from scheduler.core import queue_order
from scheduler.core.queue_order import by_priority, class_orders, uniform_priority

TE, BE = JobClass.TE, JobClass.BE
QUEUE_POLICIES = ["fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp", "fitgpp-shrink"]
#: The other policies a live cluster can run; none of the jobs below has run yet, so Tiresias has
#: them all in its first queue, and none has a throughput model, so Rubick runs them as they are.
OTHER_LIVE_POLICIES = ["fifo-fixed", "synergy", "tiresias", "rubick", "pollux"]


def pend(jid: str, gpus: int, cls: JobClass = BE, submit: float = 0.0, priority: int = 0, tenant: str = "") -> PendingJob:
    return PendingJob(JobSpec(jid, cls, gpus, submit, priority=priority, tenant=tenant))


def test_higher_priority_starts_first_in_every_policy_a_live_cluster_runs():
    # One free GPU; the job submitted last asks for priority 1000, the first for -1000.
    for name in QUEUE_POLICIES + OTHER_LIVE_POLICIES:
        for cls in (TE, BE):
            pending = [pend("low", 1, cls, 0.0, -1000), pend("mid", 1, cls, 1.0, 0), pend("high", 1, cls, 2.0, 1000)]
            snap = Snapshot([NodeCapacity("n1", 1)], [], pending)
            started = [d.job_id for d in make_policy(name).decide(snap, 10.0) if isinstance(d, Start)]
            assert started == ["high"], (name, cls, started)


def test_tiresias_orders_waiting_jobs_by_priority_within_a_queue_and_preempts_nobody_for_it():
    # r runs in queue 0 (no service yet); p, of higher priority, waits in the same queue behind it,
    # and ahead of the earlier q. A job demoted by its service stays behind, whatever its priority.
    running = [RunningJob(JobSpec("r", BE, 1, 0.0), Placement.of({"n1": 1}), 0.0, 0.0)]
    pending = [pend("q", 1, submit=1.0), pend("p", 1, submit=2.0, priority=9),
               PendingJob(JobSpec("old", BE, 1, 0.5, priority=99), progress=7200.0)]
    snap = Snapshot([NodeCapacity("n1", 1)], running, pending)
    assert ids(orders(snap, "tiresias")[BE]) == ["p", "q", "old"]
    assert not [d for d in make_policy("tiresias").decide(snap, 10.0) if isinstance(d, Start | Preempt)]


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
    policy = draw(st.sampled_from(QUEUE_POLICIES + OTHER_LIVE_POLICIES))
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


def ids(jobs):
    return [p.spec.id for p in jobs]


def test_queues_without_fair_share_are_the_snapshot_by_priority():
    pending = [pend("a", 1, submit=1.0), pend("t", 1, TE, submit=2.0), pend("b", 1, submit=3.0, priority=5)]
    snap = Snapshot([NodeCapacity("n1", 1)], [], pending)
    te, be, fair = queue_order.queues(snap, [pending[1]])
    assert (ids(te), ids(be), fair) == (["t"], ["b", "a", "t"], None)
    same = Snapshot([NodeCapacity("n1", 1)], [], pending[:2])
    assert queue_order.queues(same, [])[1] is same.pending  # one priority: the snapshot's own list


def orders(snap: Snapshot, name: str = "fitgpp", now: float = 10.0) -> dict[JobClass, list[PendingJob]]:
    """Each class's jobs in the order the policy ``name`` considers them, as positions count them."""
    return class_orders(policy_registry.queue_order(make_policy(name), snap, now))


def test_class_orders_count_within_each_class_by_priority_then_arrival():
    snap = Snapshot([], [], [pend("c", 1, submit=0.5), pend("a", 1, submit=1.0), pend("b", 1, submit=2.0, priority=5),
                             pend("t", 1, TE, submit=3.0)])
    orders_ = orders(snap)
    assert (ids(orders_[BE]), ids(orders_[TE])) == (["b", "c", "a"], ["t"])


def test_class_orders_follow_fair_share_ahead_of_arrival():
    # Tenant a holds the node and used much; b used nothing: b's later job is considered first.
    running = [RunningJob(JobSpec("r", BE, 4, 0.0, tenant="a"), Placement.of({"n1": 4}), 0.0, 0.0)]
    pending = [pend("a1", 4, submit=1.0, tenant="a"), pend("a2", 4, submit=2.0, tenant="a"),
               pend("b1", 4, submit=3.0, tenant="b")]
    tenants = {"a": TenantUsage(1.0, 50_000.0), "b": TenantUsage(1.0, 0.0)}
    snap = Snapshot([NodeCapacity("n1", 4), NodeCapacity("n2", 4)], running, pending, tenants=tenants)
    assert ids(orders(snap)[BE]) == ["b1", "a1", "a2"]
    assert ids(orders(Snapshot(snap.nodes, running, pending))[BE]) == ["a1", "a2", "b1"]


def test_te_jobs_beyond_their_tenants_te_bound_come_after_the_others():
    # Two tenants of equal share on 4 GPUs: a's entitlement is 2 GPUs, so its second 2-GPU TE job
    # queues as BE; b's TE job, submitted last, keeps its place in the TE queue ahead of it.
    pending = [pend("ta1", 2, TE, 1.0, tenant="a"), pend("ta2", 2, TE, 2.0, tenant="a"),
               pend("tb", 2, TE, 3.0, tenant="b")]
    tenants = {"a": TenantUsage(1.0, 0.0), "b": TenantUsage(1.0, 0.0)}
    snap = Snapshot([NodeCapacity("n1", 4)], [], pending, tenants=tenants)
    assert ids(orders(snap)[TE]) == ["ta1", "tb", "ta2"]
    # With a's past usage, the TE queue (arrival order within the bound) still starts with ta1;
    # fifo has no TE queue and no TE bound: its one queue is in fair order, so b's job comes first.
    used = Snapshot(snap.nodes, [], pending, tenants={"a": TenantUsage(1.0, 1e5), "b": TenantUsage(1.0, 0.0)})
    assert ids(orders(used)[TE]) == ["ta1", "tb", "ta2"]
    assert ids(orders(used, "fifo")[TE]) == ["tb", "ta1", "ta2"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(0, 6))
def test_a_strict_queue_starts_exactly_the_first_positions(seed, free):
    # fifo-strict starts jobs in its queue's order until one does not fit; with 1-GPU BE jobs and
    # ``free`` GPUs, the jobs it starts are those at positions 1..free, fair share on or off.
    rng = random.Random(seed)
    pending = [pend(f"p{i}", 1, submit=float(i), priority=rng.choice([0, 0, 5]), tenant=rng.choice("abc"))
               for i in range(rng.randint(1, 9))]
    tenants = ({t: TenantUsage(rng.choice([1.0, 2.0]), rng.choice([0.0, 500.0, 1e5])) for t in "ab"}
               if rng.random() < 0.7 else None)
    running = [RunningJob(JobSpec("r", BE, 2, 0.0, tenant="a"), Placement.of({"n1": 2}), 0.0, 0.0)]
    snap = Snapshot([NodeCapacity("n1", 2 + free)], running, pending, tenants=tenants)
    first = set(ids(orders(snap, "fifo-strict")[BE][:free]))
    assert {d.job_id for d in make_policy("fifo-strict").decide(snap, 10.0) if isinstance(d, Start)} == first


def test_tiresias_positions_put_a_job_that_has_run_long_behind_a_fresh_one():
    # Tiresias demotes by attained service: the job that ran 2 h on 1 GPU (past the first
    # threshold, 1 h) waits behind the fresh job submitted after it; arrival order would not.
    ran = PendingJob(JobSpec("ran", BE, 1, 0.0), progress=7200.0)
    snap = Snapshot([NodeCapacity("n1", 1)], [], [ran, pend("fresh", 1, submit=5.0)])
    assert ids(orders(snap, "tiresias")[BE]) == ["fresh", "ran"]
    assert ids(orders(snap, "fifo")[BE]) == ["ran", "fresh"]


def test_rubick_positions_put_te_jobs_first_and_the_rest_by_arrival_without_models():
    # No throughput functions, so no expected work: TE first, then arrival order.
    snap = Snapshot([NodeCapacity("n1", 8)], [], [pend("b1", 4, submit=0.0), pend("t1", 1, TE, submit=1.0),
                                                   pend("b2", 1, submit=2.0)])
    assert ids(policy_registry.queue_order(make_policy("rubick"), snap, 10.0)) == ["t1", "b1", "b2"]


class _Bare:
    """A policy with no ``queue_order`` of its own."""

    name = "bare"

    def decide(self, snapshot, now):  # noqa: ANN001, ANN201
        return []


def test_a_policy_without_its_own_order_is_counted_by_priority_then_arrival():
    snap = Snapshot([], [], [pend("a", 1, submit=0.0), pend("b", 1, submit=1.0, priority=3), pend("c", 1, submit=2.0)])
    assert ids(policy_registry.queue_order(_Bare(), snap, 10.0)) == ["b", "a", "c"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_every_policy_orders_each_pending_job_exactly_once_and_leaves_the_snapshot_as_it_was(seed):
    rng = random.Random(seed)
    pending = [PendingJob(JobSpec(f"p{i}", rng.choice([TE, BE]), rng.choice([1, 2, 4]), float(i),
                                  priority=rng.choice([0, 0, 7]), tenant=rng.choice("ab")),
                          progress=rng.choice([0.0, 0.0, 5000.0, 50000.0]))
               for i in range(rng.randint(0, 12))]
    tenants = {t: TenantUsage(1.0, rng.choice([0.0, 1e5])) for t in "ab"} if rng.random() < 0.5 else None
    snap = Snapshot([NodeCapacity("n1", 4), NodeCapacity("n2", 4)], [], list(pending), tenants=tenants)
    for name in policy_names():
        order = policy_registry.queue_order(make_policy(name), snap, 100_000.0)
        assert sorted(ids(order)) == sorted(ids(pending)), name
        assert snap.pending == pending, name

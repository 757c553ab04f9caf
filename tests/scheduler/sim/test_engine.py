"""Simulator mechanics on hand-computed scenarios, with the toy policies."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Pend, Preempt, Reason, Start
from scheduler.core.model import JobClass, NodeCapacity, Placement
from scheduler.sim.cluster import make_nodes
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig, SimulationError

from tests.support.sim_jobs import job
from tests.support.toy_policies import GreedyFifo, PreemptOldestForTE

TE, BE = JobClass.TE, JobClass.BE


class Recorder:
    """Wraps a policy and records what each decide() call saw."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []
        self.te_views = []

    def decide(self, snapshot, now):
        self.calls.append(
            (
                now,
                {r.spec.id: (r.progress, r.preempting) for r in snapshot.running},
                [p.spec.id for p in snapshot.pending],
                [(p.spec.submit_time, p.spec.id) for p in snapshot.pending],
                {p.spec.id: (p.progress, p.preemptions) for p in snapshot.pending},
            )
        )
        self.te_views.append(([p.spec.id for p in snapshot.pending_te], [p.spec.id for p in snapshot.pending]))
        self._check_free(snapshot)
        return self.inner.decide(snapshot, now)

    @staticmethod
    def _check_free(snapshot):
        """Snapshot.free agrees with what running jobs hold."""
        held = {n.name: 0 for n in snapshot.nodes}
        for r in snapshot.running:
            for name, g in r.placement.parts:
                held[name] += g
        assert {n: v[0] for n, v in snapshot.free.items()} == {n.name: n.gpus - held[n.name] for n in snapshot.nodes}


def by_id(result):
    return {o.job_id: o for o in result.outcomes}


# A 2-GPU node. "be" (2 GPUs, 1000 s, grace 30 s) starts at 0; "te" arrives at
# 100 and preempts it: notice at 100, vacate at 130, te runs 130..180, be
# restarts at 180 with a 20 s resume overhead and its 100 s of progress, so it
# completes at 180 + 20 + 900 = 1100. "late" (1 GPU) waits from 500 to 1100.
SCENARIO = [
    job("be", 0, 1000, gpus=2, grace=30),
    job("te", 100, 50, gpus=1, klass=TE),
    job("late", 500, 10, gpus=1),
]


def run_scenario(record_attempts=True):
    policy = Recorder(PreemptOldestForTE(max_preemptions=1))
    result = simulate(policy, [NodeCapacity("n0", 2)], SCENARIO, SimConfig(resume_overhead=20, record_attempts=record_attempts))
    return policy, result


def test_preempted_job_holds_resources_for_its_grace_then_resumes_with_its_progress():
    _, result = run_scenario()
    o = by_id(result)
    assert (o["be"].first_start, o["be"].completion, o["be"].preemptions) == (0, 1100, 1)
    assert (o["te"].first_start, o["te"].completion) == (130, 180)
    assert (o["late"].first_start, o["late"].completion) == (1100, 1110)
    assert o["te"].slowdown == pytest.approx(80 / 50)
    assert o["be"].slowdown == pytest.approx(1.1)
    attempts = [(a.job_id, a.start, a.end, a.notice, a.preempted_for) for a in result.attempts]
    assert attempts == [
        ("be", 0, 130, 100, "te"),
        ("te", 130, 180, None, None),
        ("be", 180, 1100, None, None),
        ("late", 1100, 1110, None, None),
    ]
    [p] = result.preemptions
    assert (p.time, p.job_id, p.for_job, p.attempt_runtime, p.progress, p.count) == (100, "be", "te", 100, 100, 1)


def test_policy_sees_progress_at_now_frozen_at_notice_and_kept_while_pending():
    policy, _ = run_scenario()
    seen = {now: (running, pending) for now, running, _, _, pending in policy.calls}
    assert seen[100][0] == {"be": (100.0, False)}
    assert seen[130][1]["be"] == (100.0, 1)  # back in the queue with its progress
    # Restarted at 180, restoring until 200: at 500 it has 100 + 300 s of work.
    assert seen[500][0] == {"be": (400.0, False)}


def test_lost_gpu_seconds_are_grace_hold_plus_resume_overhead_and_utilization_counts_them():
    _, result = run_scenario()
    assert result.lost_gpu_seconds == pytest.approx(2 * 30 + 2 * 20)
    useful = 2 * 1000 + 50 + 10
    assert result.allocated_gpu_seconds == pytest.approx(useful + result.lost_gpu_seconds)
    # Recorded only when the allocation changes: the notice at 100 frees nothing.
    assert list(result.util_times) == [0, 130, 180, 1100, 1110]
    assert list(result.util_gpus) == [2, 1, 2, 1, 0]


def test_decide_runs_once_per_batch_of_simultaneous_events_and_only_with_pending_jobs():
    jobs = [job("a", 0, 10), job("b", 0, 10), job("c", 0, 10), job("d", 10, 5), job("e", 30, 5)]
    policy = Recorder(GreedyFifo())
    result = simulate(policy, [NodeCapacity("n0", 2)], jobs)
    times = [c[0] for c in policy.calls]
    # t=0: three arrivals in one call; t=10: two completions and an arrival in
    # one call; t=15 and t=20: nothing pending, no call; t=30: arrival.
    assert times == [0, 10, 30]
    assert policy.calls[0][2] == ["a", "b", "c"]
    assert by_id(result)["c"].first_start == 10
    assert result.decide_calls == 3


def test_pending_stays_in_arrival_order_when_a_preempted_job_returns():
    jobs = [
        job("b1", 0, 500, gpus=1, grace=10),
        job("b2", 1, 500, gpus=1, grace=10),
        job("b3", 2, 50, gpus=1),
        job("t1", 3, 20, klass=TE),
        job("b4", 4, 50, gpus=1),
    ]
    policy = Recorder(PreemptOldestForTE(max_preemptions=2))
    simulate(policy, [NodeCapacity("n0", 2)], jobs)
    for _, _, _, keys, _ in policy.calls:
        assert keys == sorted(keys)
    for te_ids, ids in policy.te_views:
        assert te_ids == [i for i in ids if i.startswith("t")]
    # b1 is preempted for t1 at 3 and vacates at 13, back ahead of later arrivals.
    returned = [ids for now, _, ids, _, _ in policy.calls if now == 13]
    assert returned == [["b1", "b3", "t1", "b4"]]


def test_zero_grace_frees_the_gpus_at_the_notice():
    jobs = [job("be", 0, 100, gpus=1, grace=0), job("te", 10, 5, klass=TE)]
    result = simulate(PreemptOldestForTE(), [NodeCapacity("n0", 1)], jobs, SimConfig(resume_overhead=0))
    o = by_id(result)
    assert o["te"].first_start == 10
    assert o["be"].completion == 10 + 5 + 90
    assert result.lost_gpu_seconds == 0


def test_multi_node_job_releases_every_part():
    jobs = [job("big", 0, 10, gpus=3), job("a", 1, 10, gpus=2), job("b", 1, 10, gpus=2)]
    result = simulate(GreedyFifo(), make_nodes(2, 2), jobs, SimConfig(record_attempts=True))
    o = by_id(result)
    assert o["big"].completion == 10
    assert (o["a"].first_start, o["b"].first_start) == (10, 10)
    assert result.attempts[0].placement == Placement((("n00", 2), ("n01", 1)))


class Scripted:
    """Returns the given decisions at the first call, then defers to GreedyFifo."""

    def __init__(self, first):
        self.first = first
        self.fallback = GreedyFifo()

    def decide(self, snapshot, now):
        if self.first is not None:
            out, self.first = self.first, None
            return out
        return self.fallback.decide(snapshot, now)


ONE = Placement((("n0", 1),))


@pytest.mark.parametrize(
    "decisions, fragment",
    [
        ([Start("a", ONE), Start("b", ONE), Start("c", ONE)], "over-allocates: job c: does not fit on n0"),
        ([Start("zz", ONE)], "'zz', which is not pending"),
        ([Start("a", ONE), Start("a", ONE)], "'a', which is not pending"),
        ([Start("a", Placement((("n0", 2),)))], "with 2 GPUs, the job needs 1"),
        ([Start("a", Placement((("nX", 1),)))], "unknown node 'nX'"),
        ([Preempt("a", for_job=None)], "not running"),
        ([Start("a", ONE), Pend("a", Reason.RESOURCES)], "Pend for 'a', which is not pending"),
        (["not a decision"], "unknown decision"),
    ],
)
def test_infeasible_or_inconsistent_decisions_raise(decisions, fragment):
    jobs = [job("a", 0, 10), job("b", 0, 10), job("c", 0, 10)]
    with pytest.raises(SimulationError, match=fragment):
        simulate(Scripted(decisions), [NodeCapacity("n0", 2)], jobs)


def test_preempting_a_job_twice_raises():
    class Twice:
        def decide(self, snapshot, now):
            if now == 0:
                return [Start("a", ONE)]
            return [Preempt("a", for_job="b"), Preempt("a", for_job="b")]

    with pytest.raises(SimulationError, match="already preempting"):
        simulate(Twice(), [NodeCapacity("n0", 1)], [job("a", 0, 10, grace=5), job("b", 1, 1)])


def test_cpu_and_memory_of_a_node_are_enforced_when_declared():
    from scheduler.core.model import JobSpec
    from scheduler.sim.workloads.types import SimJob

    big = SimJob(JobSpec(id="a", job_class=BE, num_gpus=1, submit_time=0, num_cpus=6), 10)
    other = SimJob(JobSpec(id="b", job_class=BE, num_gpus=1, submit_time=0, num_cpus=6), 10)
    with pytest.raises(SimulationError, match="over-allocates"):
        simulate(Scripted([Start("a", ONE), Start("b", ONE)]), [NodeCapacity("n0", 2, cpus=8)], [big, other])
    # The same starts are fine on a node that does not track CPUs.
    result = simulate(Scripted([Start("a", ONE), Start("b", ONE)]), [NodeCapacity("n0", 2)], [big, other])
    assert [o.completion for o in result.outcomes] == [10, 10]


def test_a_policy_that_never_starts_anything_is_reported_as_stalled():
    class Idle:
        def decide(self, snapshot, now):
            return [Pend(p.spec.id, Reason.RESOURCES) for p in snapshot.pending]

    with pytest.raises(SimulationError, match="stalled"):
        simulate(Idle(), [NodeCapacity("n0", 1)], [job("a", 0, 10)])


def test_progress_callback_reports_completion():
    calls = []
    simulate(GreedyFifo(), [NodeCapacity("n0", 1)], [job("a", 0, 10), job("b", 0, 10)], progress=lambda d, n: calls.append((d, n)))
    assert calls[-1] == (2, 2)

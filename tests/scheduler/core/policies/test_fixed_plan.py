"""Tiresias (``scheduler/core/policies/fixed_plan.py``) against small cases
worked by hand from the paper's discretized 2D-LAS (Gu et al., NSDI 2019):
queues by attained service (GPUs x seconds run), higher queues first, a job
that does not fit skipped, running jobs of a strictly lower queue preempted
for a waiting job, and no head-of-line blocking."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Preempt, Start
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.policies.fixed_plan import Tiresias

HOUR = 3600.0


def running(jid: str, node: str, gpus: int, progress: float, submit: float = 0.0) -> RunningJob:
    spec = JobSpec(jid, JobClass.BE, gpus, submit)
    return RunningJob(spec, Placement.of({node: gpus}), attempt_start=submit, first_start=submit, progress=progress)


def pending(jid: str, gpus: int, submit: float) -> PendingJob:
    return PendingJob(JobSpec(jid, JobClass.BE, gpus, submit))


def decide(policy: Tiresias, nodes, run, wait, now: float):
    out = policy.decide(Snapshot(list(nodes), list(run), list(wait)), now)
    return ({d.job_id for d in out if isinstance(d, Preempt)},
            {d.job_id: dict(d.placement.parts) for d in out if isinstance(d, Start)})


def test_a_job_is_demoted_by_attained_service_and_preempted_for_a_higher_queue() -> None:
    """One 4-GPU node, queue threshold 1 GPU-hour. A: 2 GPUs x 1,900 s =
    3,800 GPU-s, queue 1. B: 1 GPU x 1,900 s = 1,900 GPU-s, queue 0. C (new,
    2 GPUs, queue 0) finds 1 GPU free; by hand: queue 0 holds B (running)
    and C, queue 1 holds A; serving B then C leaves no room for A, so A is
    preempted for C, and B, with less service, is not."""
    policy = Tiresias(thresholds=(HOUR,))
    preempted, started = decide(policy, [NodeCapacity("n1", 4)],
                                [running("A", "n1", 2, 1900.0), running("B", "n1", 1, 1900.0)],
                                [pending("C", 2, 2000.0)], 2000.0)
    assert preempted == {"A"} and started == {}


def test_no_preemption_within_a_queue() -> None:
    """Same case with A at 2 GPUs x 1,700 s = 3,400 GPU-s: still queue 0,
    like C, and a running job comes before a waiting one of its queue."""
    policy = Tiresias(thresholds=(HOUR,))
    preempted, started = decide(policy, [NodeCapacity("n1", 4)],
                                [running("A", "n1", 2, 1700.0), running("B", "n1", 1, 1900.0)],
                                [pending("C", 2, 2000.0)], 2000.0)
    assert preempted == set() and started == {}


def test_a_long_waiting_job_that_does_not_fit_does_not_block_the_queue() -> None:
    """Two 4-GPU nodes. L (8 GPUs) has waited 8 h and cannot start without
    evicting X, a queue-0 job served before it; S (1 GPU) fits in the free
    GPU of n2. 2D-LAS skips L and starts S (the paper has no head-of-line
    blocking). The plan-keeping baselines' starvation rule, still available
    as ``starvation_threshold``, would hold S behind L instead: with it, the
    Morphling workload-base gave a mean JCT of 1.45 h, and 0.31 h with the
    same jobs arriving 1.3x faster."""
    nodes = [NodeCapacity("n1", 4), NodeCapacity("n2", 4)]
    run = [running("A", "n1", 4, 1000.0), running("X", "n2", 2, 10.0)]
    wait = [pending("L", 8, 0.0), pending("S", 1, 7.9 * HOUR)]
    preempted, started = decide(Tiresias(thresholds=(HOUR,)), nodes, run, wait, 8 * HOUR)
    assert started == {"S": {"n2": 1}} and preempted == set()
    blocked = Tiresias(thresholds=(HOUR,), starvation_threshold=6 * HOUR)
    assert decide(blocked, nodes, run, wait, 8 * HOUR) == (set(), {})


@settings(max_examples=60, deadline=None)
@given(services=st.lists(st.tuples(st.integers(1, 4), st.floats(0.0, 20 * HOUR)), min_size=1, max_size=6),
       newcomer=st.integers(1, 8))
def test_only_jobs_of_a_lower_queue_than_the_waiting_job_are_preempted(services, newcomer) -> None:
    """Whatever the running jobs' service, a waiting job with none (queue 0)
    preempts only jobs whose attained service puts them in a lower queue,
    and never more GPUs than the cluster has are started."""
    policy = Tiresias()
    nodes = [NodeCapacity(f"n{i}", 4) for i in range(len(services))]
    run = [running(f"r{i}", f"n{i}", g, t / g) for i, (g, t) in enumerate(services)]
    out = policy.decide(Snapshot(nodes, run, [pending("new", newcomer, 1.0)]), 2.0)
    for d in out:
        if isinstance(d, Preempt):
            victim = next(r for r in run if r.spec.id == d.job_id)
            assert policy.queue_of(victim.spec.num_gpus, victim.progress) > 0
    started = sum(d.placement.num_gpus for d in out if isinstance(d, Start))
    assert started + sum(g for g, _ in services) <= 4 * len(services)


def test_within_a_queue_arrival_order_lets_an_earlier_job_displace_a_later_one() -> None:
    """The Pollux study's Tiresias orders a queue by arrival, running or not.
    One 4-GPU node: B (arrived at 20 s, 4 GPUs, 100 GPU-s: queue 0) runs;
    A (arrived at 10 s, 2 GPUs, queue 0) waits. By arrival A comes first, so
    B is preempted for it; with running jobs first (the default) it is not."""
    run = [running("B", "n1", 4, 25.0, submit=20.0)]
    wait = [pending("A", 2, 10.0)]
    arrival = Tiresias(thresholds=(HOUR,), within_queue="arrival")
    assert decide(arrival, [NodeCapacity("n1", 4)], run, wait, 100.0) == ({"B"}, {})
    assert decide(Tiresias(thresholds=(HOUR,)), [NodeCapacity("n1", 4)], run, wait, 100.0) == (set(), {})


def test_within_queue_is_checked() -> None:
    import pytest

    with pytest.raises(ValueError, match="within_queue"):
        Tiresias(within_queue="lifo")


def test_most_free_placement_takes_the_emptiest_nodes_first_as_the_pollux_study() -> None:
    """Nodes n1 (1 free of 4), n2 (4 free), n3 (2 free). Packed: a 1-GPU job
    fills n1 and a 6-GPU job takes the fewest nodes, n2 then n3. Most-free:
    the 1-GPU job goes to n2, the emptiest, and the 6-GPU job spreads from
    the node with the most free GPUs down (ties in node order)."""
    nodes = [NodeCapacity("n1", 4), NodeCapacity("n2", 4), NodeCapacity("n3", 4)]
    run = [running("R1", "n1", 3, 0.0), running("R3", "n3", 2, 0.0)]
    small, big = pending("S", 1, 10.0), pending("B", 6, 20.0)
    packed = Tiresias(thresholds=(HOUR,))
    assert decide(packed, nodes, run, [small], 100.0)[1] == {"S": {"n1": 1}}
    assert decide(packed, nodes, run, [big], 100.0)[1] == {"B": {"n2": 4, "n3": 2}}
    most_free = Tiresias(thresholds=(HOUR,), placement="most-free")
    assert decide(most_free, nodes, run, [small], 100.0)[1] == {"S": {"n2": 1}}
    assert decide(most_free, nodes, run, [small, big], 100.0)[1] == {"S": {"n2": 1}, "B": {"n2": 3, "n3": 2, "n1": 1}}
    assert decide(most_free, nodes, run, [pending("X", 8, 5.0)], 100.0)[1] == {}


def test_placement_is_checked() -> None:
    import pytest

    with pytest.raises(ValueError, match="placement"):
        Tiresias(placement="random")

"""Fair share in the simulator, as properties over drawn shares and timings: backlogged tenants converge
to their shares; a borrowing tenant gives GPUs back exactly when the minimum runtime allows, and never
below its own part."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.model import NodeCapacity
from scheduler.core.policy import make_policy
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig
from tests.scheduler.sim.test_engine_fair_share import H, be, held_between


@settings(max_examples=8, deadline=None, derandomize=True)
@given(shares=st.lists(st.sampled_from([1.0, 2.0, 3.0, 4.0]), min_size=2, max_size=3),
       policy=st.sampled_from(["fitgpp", "te-priority", "fifo"]))
def test_backlogged_tenants_converge_to_their_shares(shares, policy):
    tenants = {f"t{k}": s for k, s in enumerate(shares)}
    jobs = [be(f"{t}-{i:03d}", t, 1, k * 1.0, 1800.0) for k, t in enumerate(tenants) for i in range(120)]
    config = SimConfig(record_attempts=True, shares=tenants, half_life=H)
    result = simulate(make_policy(policy, explain=False), [NodeCapacity("n1", 8)], jobs, config)
    held = held_between(result, {j.spec.id: j.spec.tenant for j in jobs}, 2 * H, 8 * H)
    total, weight = sum(held.values()), sum(shares)
    for t, share in tenants.items():
        assert abs(held.get(t, 0.0) / total - share / weight) < 0.07, (t, held, tenants)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(min_runtime=st.sampled_from([0.0, 300.0, 1200.0, 3000.0]), arrival=st.floats(60.0, 2000.0),
       grace=st.sampled_from([0.0, 60.0]), policy=st.sampled_from(["fitgpp", "te-priority", "preempt-newest"]))
def test_reclaim_waits_for_the_minimum_runtime_and_keeps_the_borrowers_part(min_runtime, arrival, grace, policy):
    # a borrows the whole idle 8-GPU cluster with four 2-GPU jobs; b's two 2-GPU jobs arrive later.
    jobs = [be(f"a{i}", "a", 2, 0.0, 10 * H, grace=grace) for i in range(4)]
    jobs += [be(f"b{i}", "b", 2, arrival, H) for i in range(2)]
    config = SimConfig(record_attempts=True, shares={}, half_life=H)
    result = simulate(make_policy(policy, explain=False, reclaim_min_runtime=min_runtime),
                      [NodeCapacity("n1", 8)], jobs, config)
    notices = [(p.time, p.job_id, p.for_job) for p in result.preemptions]
    # b's entitlement is 4 GPUs: exactly two of a's jobs go, once they have run min_runtime, and never more,
    # so a keeps its own part (4 GPUs).
    assert len(notices) == 2 and len({jid for _, jid, _ in notices}) == 2
    for when, victim, for_job in notices:
        assert victim.startswith("a") and for_job.startswith("b")
        assert when == max(arrival, min_runtime)
    starts = sorted(a.start for a in result.attempts if a.job_id.startswith("b"))
    assert starts == [max(arrival, min_runtime) + grace] * 2

"""What an attempt gets: a Start's allocation validated (GPU count, plan,
CPUs), the speed it runs at, and the count of model-timed attempts and of
runs below the request."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Start
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimulationError
from tests.support.scripted_sim import NODES, Script, elastic, place, probe


def test_a_faster_plan_finishes_in_fewer_seconds_and_progress_counts_iterations():
    policy = Script({0.0: [Start("j", place(a=2), plan="fast")], 10.0: []})
    result = simulate(policy, NODES, [elastic("j", steps=100), probe(10.0)])
    done = {o.job_id: o for o in result.outcomes}
    # 100 iterations of 0.5 s; duration is 100 x 1.0 s (the request).
    assert done["j"].completion == pytest.approx(50.0) and done["j"].duration == pytest.approx(100.0)
    progress, steps, plan, gpus, _ = policy.seen[10.0]["j"]
    assert (progress, steps, plan, gpus) == (pytest.approx(20.0), pytest.approx(20.0), "fast", 2)


@pytest.mark.parametrize("decisions, message", [
    ([Start("j", place(a=4, b=1))], "with 5 GPUs, the job needs 1 to 4"),
    ([Start("j", place(a=2), plan="zero")], "may not run plan 'zero'"),
    ([Start("j", place(a=2), plan="fast", cpus=-1.0)], "cpus=-1"),
])
def test_bad_starts_are_policy_bugs(decisions, message):
    with pytest.raises(SimulationError, match=message):
        simulate(Script({0.0: decisions}), NODES, [elastic("j")])


def test_model_fallbacks_and_runs_below_the_request_are_counted():
    policy = Script({0.0: [Start("j", place(a=1), plan="fast"), Start("k", place(b=4), plan="fast")]})
    jobs = [elastic("j", 10, unmeasured=(("fast", 1),)), elastic("k", 10)]
    result = simulate(policy, NODES, jobs)
    assert (result.timed_attempts, result.modelled_attempts) == (2, 1)
    j = next(o for o in result.outcomes if o.job_id == "j")
    assert result.modelled_seconds == pytest.approx(j.completion)
    # j runs at 0.8 s per iteration against 1.0 requested: faster; nobody is below.
    assert result.below_request == frozenset()
    slow = Script({0.0: [Start("j", place(a=1, b=1), plan="fast")]})  # 0.5 x 2 (two nodes) = 1.0 s: equal
    assert simulate(slow, NODES, [elastic("j", 10)]).below_request == frozenset()
    slower = Script({0.0: [Start("j", place(a=1, b=1))]})  # plan slow on 2 GPUs over 2 nodes: 2.0 s
    assert simulate(slower, NODES, [elastic("j", 10)]).below_request == {"j"}

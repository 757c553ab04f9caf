"""The simulator's mechanics for reconfigurable jobs, with hand-made speeds.

Work is counted in iterations: a job of ``steps`` iterations whose request
runs at ``reference`` seconds per iteration has ``duration = steps *
reference`` and progresses at ``reference / iteration time`` seconds of work
per second on whatever plan and allocation it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.core.decisions import Preempt, Reconfigure, Start
from scheduler.core.model import JobClass, JobSpec, Node, Placement
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig, SimulationError
from scheduler.sim.workloads.types import SimJob

# Seconds per iteration by (plan, GPUs); a second node doubles the time.
TIMES = {("slow", 2): 1.0, ("fast", 2): 0.5, ("fast", 1): 0.8, ("fast", 4): 0.25, ("slow", 4): 0.5}


@dataclass(frozen=True)
class Speed:
    reference: float
    unmeasured: tuple = ()

    def iter_time(self, plan, placement, cpus):
        t = TIMES.get((plan, sum(placement)))
        if t is None:
            return None
        return t * 2 ** (len(placement) - 1), (plan, sum(placement)) not in self.unmeasured


def elastic(jid: str, steps: int = 100, gpus: int = 2, submit: float = 0.0, grace: float = 0.0,
            unmeasured: tuple = (), guaranteed: bool = False) -> SimJob:
    spec = JobSpec(id=jid, job_class=JobClass.BE, num_gpus=gpus, submit_time=submit, grace_period=grace,
                   model="m", plan="slow", allowed_plans=("fast", "slow"), min_gpus=1, max_gpus=4, steps=steps,
                   guaranteed=guaranteed, throughput=object())
    ref = TIMES[("slow", gpus)]
    return SimJob(spec, steps * ref, Speed(ref, unmeasured))


class Script:
    """Returns the decisions listed for a time (once) and starts "probe" jobs
    (which only make the simulator call it at their arrival) on node ``c``;
    records what it saw."""

    decide_without_pending = True

    def __init__(self, plan: dict[float, list]) -> None:
        self.plan = plan
        self.seen: dict[float, dict[str, tuple]] = {}

    def decide(self, snapshot, now):
        self.seen[now] = {r.spec.id: (r.progress, r.steps_done, r.plan, r.spec.num_gpus, r.reconfiguring)
                          for r in snapshot.running}
        out = self.plan.pop(now, [])
        probes = [p for p in snapshot.pending if p.spec.id.startswith("probe")]
        return out + [Start(p.spec.id, place(c=1)) for p in probes]


def probe(at: float, name: str = "probe") -> SimJob:
    """A one-iteration job on one GPU of node c, arriving at ``at``."""
    spec = JobSpec(id=f"{name}{at:g}", job_class=JobClass.BE, num_gpus=1, submit_time=at)
    return SimJob(spec, 0.001)


def place(**parts: int) -> Placement:
    return Placement.of(parts)


NODES = [Node("a", 4), Node("b", 4), Node("c", 4)]


def test_a_faster_plan_finishes_in_fewer_seconds_and_progress_counts_iterations():
    policy = Script({0.0: [Start("j", place(a=2), plan="fast")], 10.0: []})
    result = simulate(policy, NODES, [elastic("j", steps=100), probe(10.0)])
    done = {o.job_id: o for o in result.outcomes}
    # 100 iterations of 0.5 s; duration is 100 x 1.0 s (the request).
    assert done["j"].completion == pytest.approx(50.0) and done["j"].duration == pytest.approx(100.0)
    progress, steps, plan, gpus, _ = policy.seen[10.0]["j"]
    assert (progress, steps, plan, gpus) == (pytest.approx(20.0), pytest.approx(20.0), "fast", 2)


def test_reconfigure_freezes_progress_pays_the_restart_and_continues_at_the_new_speed():
    policy = Script({
        0.0: [Start("j", place(a=2))],
        40.0: [Reconfigure("j", place(a=4), "fast")],
    })
    jobs = [elastic("j", steps=100), probe(40.0)]
    result = simulate(policy, NODES, jobs, SimConfig(reconfigure_overhead=10.0))
    j = next(o for o in result.outcomes if o.job_id == "j")
    # 40 iterations at 1 s, 10 s restart, 60 iterations at 0.25 s.
    assert j.completion == pytest.approx(40 + 10 + 15)
    assert result.reconfigurations == 1
    # Lost: 4 GPUs x 10 s restarting; allocated: 2 x 40 + 4 x 25 (restart included).
    assert result.lost_gpu_seconds == pytest.approx(40.0)
    assert result.allocated_gpu_seconds == pytest.approx(2 * 40 + 4 * 25 + 0.001)  # + the probe


def test_a_shrink_with_a_grace_period_holds_the_old_gpus_while_it_checkpoints():
    policy = Script({
        0.0: [Start("j", place(a=4), plan="fast")],
        8.0: [Reconfigure("j", place(a=2), "fast", for_job="other")],
    })
    jobs = [elastic("j", steps=200, gpus=4, grace=5.0), probe(8.0), probe(10.0), probe(14.0)]
    result = simulate(policy, NODES, jobs, SimConfig(reconfigure_overhead=0.0, record_attempts=True))
    assert policy.seen[10.0]["j"][3] == 4 and policy.seen[10.0]["j"][4] is True  # still 4 GPUs, checkpointing
    assert policy.seen[14.0]["j"][3] == 2 and policy.seen[14.0]["j"][4] is False
    # Iterations: 32 in the first 8 s (0.25 s each), none while checkpointing,
    # then the remaining 168 at 0.5 s from t = 13.
    j = next(o for o in result.outcomes if o.job_id == "j")
    assert j.completion == pytest.approx(13 + 168 * 0.5)
    held = dict(zip(result.util_times, result.util_gpus))
    assert held[0.0] == 4 and held[13.0] == 2  # 2 GPUs given back when the checkpoint ends


def test_jobs_may_trade_places_in_one_call():
    policy = Script({
        0.0: [Start("x", place(a=4), plan="fast"), Start("y", place(b=4), plan="fast")],
        5.0: [Reconfigure("x", place(b=4), "fast"), Reconfigure("y", place(a=4), "fast")],
    })
    jobs = [elastic("x", 100, gpus=4), elastic("y", 100, gpus=4), probe(5.0)]
    result = simulate(policy, NODES, jobs, SimConfig(reconfigure_overhead=0.0))
    assert result.reconfigurations == 2


@pytest.mark.parametrize("decisions, message", [
    ([Start("j", place(a=4, b=1))], "with 5 GPUs, the job needs 1 to 4"),
    ([Start("j", place(a=2), plan="zero")], "may not run plan 'zero'"),
    ([Start("j", place(a=2), plan="fast", cpus=-1.0)], "cpus=-1"),
])
def test_bad_starts_are_policy_bugs(decisions, message):
    with pytest.raises(SimulationError, match=message):
        simulate(Script({0.0: decisions}), NODES, [elastic("j")])


def test_reconfiguring_a_job_that_is_not_running_or_not_reconfigurable_is_a_policy_bug():
    plain = SimJob(JobSpec("p", JobClass.BE, 2, 0.0), 50.0)
    with pytest.raises(SimulationError, match="not reconfigurable"):
        simulate(Script({0.0: [Start("p", place(a=2))], 1.0: [Reconfigure("p", place(a=1), "")]}),
                 NODES, [plain, probe(1.0)])
    with pytest.raises(SimulationError, match="not running"):
        script = Script({0.0: [Start("j", place(a=2), plan="fast")], 1.0: [Preempt("j", None)],
                         2.0: [Reconfigure("j", place(a=1), "fast")]})
        simulate(script, NODES, [elastic("j", grace=5.0), probe(1.0), probe(2.0)])
    with pytest.raises(SimulationError, match="not running"):
        simulate(Script({0.0: [Reconfigure("j", place(a=1), "fast")]}), NODES, [elastic("j")])


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


def test_preempted_step_job_resumes_with_its_iterations():
    policy = Script({
        0.0: [Start("j", place(a=2))],
        30.0: [Preempt("j", None)],
        31.0: [Start("j", place(b=4), plan="fast")],
    })
    jobs = [elastic("j", 100, grace=1.0), probe(30.0), probe(31.0)]
    result = simulate(policy, NODES, jobs, SimConfig(resume_overhead=4.0))
    j = next(o for o in result.outcomes if o.job_id == "j")
    # 30 iterations, then 70 at 0.25 s after 4 s of restoring from t = 31.
    assert j.completion == pytest.approx(31 + 4 + 70 * 0.25)

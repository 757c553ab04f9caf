"""The simulator's mechanics for reconfigurable jobs, with hand-made speeds.

Work is counted in iterations: a job of ``steps`` iterations whose request
runs at ``reference`` seconds per iteration has ``duration = steps *
reference`` and progresses at ``reference / iteration time`` seconds of work
per second on whatever plan and allocation it runs.
"""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Preempt, Reconfigure, Start
from scheduler.core.model import JobClass, JobSpec
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig, SimulationError
from scheduler.sim.workloads.types import SimJob
from tests.support.scripted_sim import NODES, Script, elastic, place, probe


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


class WakingScript(Script):
    """A script that also asks to decide again at given times (``wake_at``)."""

    decide_without_pending = True

    def __init__(self, steps, wakes) -> None:  # noqa: ANN001
        super().__init__(steps)
        self.wakes = sorted(wakes)
        self.called: list[float] = []

    def decide(self, snapshot, now):  # noqa: ANN001, ANN201
        self.called.append(now)
        return super().decide(snapshot, now)

    def wake_at(self, snapshot, now):  # noqa: ANN001, ANN201
        return next((w for w in self.wakes if w > now), None)


def test_a_policy_is_called_again_when_it_asks_with_no_event_due():
    policy = WakingScript({0.0: [Start("j", place(a=2))], 30.0: [Reconfigure("j", place(a=4), "fast")]}, [30.0])
    result = simulate(policy, NODES, [elastic("j", steps=100)], SimConfig(reconfigure_overhead=10.0))
    j = next(o for o in result.outcomes if o.job_id == "j")
    assert 30.0 in policy.called and result.reconfigurations == 1
    # 30 iterations at 1 s, 10 s restart, 70 iterations at 0.25 s.
    assert j.completion == pytest.approx(30 + 10 + 17.5)
    without = Script({0.0: [Start("j", place(a=2))], 30.0: [Reconfigure("j", place(a=4), "fast")]})
    alone = simulate(without, NODES, [elastic("j", steps=100)], SimConfig(reconfigure_overhead=10.0))
    assert alone.reconfigurations == 0  # nothing happened at 30 s: the policy was never asked

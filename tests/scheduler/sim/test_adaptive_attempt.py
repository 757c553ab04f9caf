"""Adaptive jobs in the engine: rounds, restart on every allocation change,
progress by goodput, GPUs of a job preempted without grace free at once."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Preempt, Reconfigure, Start
from scheduler.core.model import JobClass, JobSpec, Placement
from scheduler.sim.cluster import make_nodes
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig
from scheduler.sim.workloads.pollux_adaptive import AdaptiveApp
from scheduler.sim.workloads.pollux_app import applications
from scheduler.sim.workloads.pollux_data import load_apps
from scheduler.sim.workloads.types import SimJob
from tests.scheduler.sim.workloads.pollux_traces import pollux_root


@pytest.fixture(scope="module")
def bert() -> AdaptiveApp:
    return AdaptiveApp(applications(load_apps(pollux_root() / "apps"))["bert"], 384)


class Script:
    """Returns the decisions listed for each decide time; records the times."""

    name = "script"

    def __init__(self, plan: dict[float, list], fill_after: float = float("inf")) -> None:
        self.plan = plan
        self.fill_after = fill_after
        self.calls: list[float] = []

    def decide(self, snapshot, now):
        self.calls.append(now)
        if now > self.fill_after and not snapshot.running and snapshot.pending:
            return [Start(snapshot.pending[0].spec.id, nodes_gpus(n00=4))]
        return self.plan.get(now, [])


def job(job_id: str, model: AdaptiveApp, submit: float = 10.0) -> SimJob:
    spec = JobSpec(job_id, JobClass.BE, 4, submit, min_gpus=1, max_gpus=model.max_gpus, adaptive=model)
    return SimJob(spec, model.target)


def nodes_gpus(**parts: int) -> Placement:
    return Placement.of(parts)


def test_decisions_come_each_round_and_a_start_pays_the_restart(bert) -> None:
    policy = Script({60.0: [Start("a", nodes_gpus(n00=4))]})
    result = simulate(policy, make_nodes(1, 4), [job("a", bert)], SimConfig(round_seconds=60.0))
    assert policy.calls[0] == 60.0 and all(t % 60 == 0 for t in policy.calls)
    done = result.outcomes[0].completion
    assert done == pytest.approx(60.0 + 30.0 + bert.finish_seconds(0.0, (4,)))


def test_a_reconfigured_job_keeps_its_progress_and_pays_the_restart_again(bert) -> None:
    policy = Script({60.0: [Start("a", nodes_gpus(n00=2))], 600.0: [Reconfigure("a", nodes_gpus(n00=4, n01=4), "")]})
    result = simulate(policy, make_nodes(2, 4), [job("a", bert)], SimConfig(round_seconds=60.0))
    at_600 = bert.advance(0.0, (2,), 600.0 - 90.0)
    expected = 600.0 + 30.0 + bert.finish_seconds(at_600, (4, 4))
    assert result.outcomes[0].completion == pytest.approx(expected)
    assert result.reconfigurations == 1


def test_gpus_of_a_job_preempted_without_grace_serve_the_same_decision(bert) -> None:
    policy = Script({
        60.0: [Start("a", nodes_gpus(n00=4))],
        120.0: [Start("b", nodes_gpus(n00=4)), Preempt("a", "b")],   # a start listed before the preemption
        180.0: [Preempt("b", None), Start("a", nodes_gpus(n00=4))],
    }, fill_after=180.0)
    jobs = [job("a", bert), job("b", bert, 20.0)]
    result = simulate(policy, make_nodes(1, 4), jobs, SimConfig(round_seconds=60.0))
    done = {o.job_id: o for o in result.outcomes}
    a_progress = bert.advance(0.0, (4,), 30.0)     # ran 30 s after its 30 s restart
    assert done["a"].completion == pytest.approx(180.0 + 30.0 + bert.finish_seconds(a_progress, (4,)))
    assert done["a"].preemptions == 1 and done["b"].preemptions == 1


def test_rounds_are_off_by_default() -> None:
    assert SimConfig().round_seconds is None
    with pytest.raises(ValueError, match="round_seconds"):
        SimConfig(round_seconds=0.0)

"""Start-time forecasts on the simulator's engine: an idle cluster starts a
fitting job now, a job waits for the running job it needs to finish, nothing
is ever forecast before now, the input snapshot is left alone, and with exact
run times and no later arrivals the forecast is what the simulator then does."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.dependencies import parse
from scheduler.core.model import JobClass, JobSpec
from scheduler.core.policy import make_policy
from scheduler.core.runtime_estimate import FinishedRun, RuntimeEstimator, with_draw
from scheduler.sim.eta import sample_run
from scheduler.sim.forecast import ForecastLimits, forecast_starts, freeze, median_starts
from scheduler.sim.cluster import make_nodes
from scheduler.sim.records import SimConfig
from scheduler.sim.workloads.types import SimJob

from tests.support.snapshot_builders import BE, TE, nodes, pend, run, snap, uniform

QUEUE_POLICIES = ["fifo", "fifo-strict", "te-priority", "preempt-newest", "preempt-random", "fitgpp"]


class Exact:
    """Knows every job's true work: ``durations[job id] - progress``."""

    def __init__(self, durations):
        self.durations = durations

    def remaining(self, spec, progress):
        return max(self.durations[spec.id] - progress, 1e-9)

    def add(self, run):
        pass


@pytest.mark.parametrize("policy", QUEUE_POLICIES)
def test_idle_cluster_starts_a_fitting_job_now(policy):
    s = snap(uniform(2), pending=[pend("a", 4, submit=5.0), pend("b", 8, cls=TE, submit=7.0)])
    assert forecast_starts(make_policy(policy), s, 100.0, RuntimeEstimator()) == {"a": 100.0, "b": 100.0}


def test_events_are_moved_up_to_the_grid_and_never_earlier():
    # r ends 5,000 s from now: lead in [4096, 8192), unit 256 s, so at 5,120 s (past exact_within).
    s = snap(nodes(("n1", 1)), running=[run("r", {"n1": 1}, time_limit=5000.0)], pending=[pend("p", 1)])
    assert forecast_starts(make_policy("fifo"), s, 0.0, RuntimeEstimator()) == {"p": 5120.0}
    exact = forecast_starts(make_policy("fifo"), s, 0.0, RuntimeEstimator(), limits=ForecastLimits(step=0.0))
    assert exact == {"p": 5000.0}


def test_a_job_waits_for_the_running_job_whose_gpus_it_needs():
    s = snap(nodes(("n1", 8)), running=[run("r", {"n1": 8}, start=0.0, progress=400.0, time_limit=1000.0)],
             pending=[pend("p", 8, submit=10.0, time_limit=300.0), pend("q", 8, submit=20.0)])
    out = forecast_starts(make_policy("fifo"), s, 400.0, RuntimeEstimator())
    # r has 600 s of its limit left; p then runs its 300 s limit.
    assert out == {"p": 1000.0, "q": 1300.0}


def test_a_preempting_job_frees_its_gpus_after_its_grace_period():
    s = snap(nodes(("n1", 2)),
             running=[run("r", {"n1": 2}, start=0.0, grace=120.0, preempting=True, notice=50.0, preempted_for="p")],
             pending=[pend("p", 2, cls=TE, submit=40.0)])
    exact = ForecastLimits(step=0.0)
    assert forecast_starts(make_policy("fitgpp"), s, 100.0, RuntimeEstimator(), limits=exact) == {"p": 170.0}


def test_past_the_horizon_the_forecast_is_none():
    s = snap(nodes(("n1", 1)), running=[run("r", {"n1": 1}, time_limit=10_000.0)], pending=[pend("p", 1)])
    out = forecast_starts(make_policy("fifo"), s, 0.0, RuntimeEstimator(), limits=ForecastLimits(horizon=3600.0))
    assert out == {"p": None}


def test_a_held_job_is_never_forecast_to_start():
    s = snap(uniform(1), pending=[pend("p", 1, hold_reason="QuotaExceeded"), pend("q", 1, submit=1.0)])
    out = forecast_starts(make_policy("fitgpp"), s, 0.0, RuntimeEstimator())
    assert out == {"p": None, "q": 0.0}


def test_targets_limit_the_answer():
    s = snap(uniform(1), pending=[pend("p", 1), pend("q", 1, submit=1.0)])
    assert forecast_starts(make_policy("fifo"), s, 0.0, RuntimeEstimator(), targets=["q", "zz"]) == {"q": 0.0}


def test_inconsistent_snapshots_are_refused():
    twice = snap(uniform(1), running=[run("a", {"n1": 1})], pending=[pend("a", 1)])
    with pytest.raises(ValueError, match="twice"):
        forecast_starts(make_policy("fifo"), twice, 0.0, RuntimeEstimator())
    over = snap(nodes(("n1", 1)), running=[run("a", {"n1": 2})])
    with pytest.raises(ValueError, match="does not fit"):
        forecast_starts(make_policy("fifo"), over, 0.0, RuntimeEstimator())


def test_the_snapshot_is_not_mutated():
    s = snap(uniform(2), running=[run("r", {"n1": 8}, progress=10.0)],
             pending=[pend(f"p{i}", 4, submit=float(i)) for i in range(5)])
    before = copy.deepcopy(s)
    forecast_starts(make_policy("fitgpp"), s, 50.0, RuntimeEstimator())
    assert s == before
    assert freeze(s) == s


@st.composite
def scenarios(draw):
    n_nodes, gpus = draw(st.integers(1, 3)), draw(st.sampled_from([2, 4]))
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        spec = JobSpec(f"j{i:02d}", draw(st.sampled_from([TE, BE])), draw(st.integers(1, n_nodes * gpus)),
                       float(draw(st.integers(0, 300))), grace_period=float(draw(st.sampled_from([0, 20]))),
                       user=draw(st.sampled_from(["u1", "u2"])))
        jobs.append(SimJob(spec, float(draw(st.integers(1, 900)))))
    return n_nodes, gpus, jobs


@pytest.mark.parametrize("policy", QUEUE_POLICIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_forecasts_are_never_before_now(policy, scenario):
    n_nodes, gpus, jobs = scenario
    _, samples = sample_run(make_policy(policy), make_nodes(n_nodes, gpus), jobs, SimConfig(resume_overhead=0.0),
                            k=len(jobs), seed=0)
    for s in samples:
        assert s.forecast_start is None or s.forecast_start >= s.submit_time


@pytest.mark.parametrize("policy", QUEUE_POLICIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_with_exact_run_times_the_last_arrival_is_forecast_exactly(policy, scenario):
    """After the last submission nothing unknown remains: the forecast made then,
    with the true run times, is what the simulator does."""
    n_nodes, gpus, jobs = scenario
    last = max(jobs, key=lambda j: (j.spec.submit_time, j.spec.id))
    exact = Exact({j.spec.id: j.duration for j in jobs})
    _, samples = sample_run(make_policy(policy), make_nodes(n_nodes, gpus), jobs, SimConfig(resume_overhead=0.0),
                            k=len(jobs), seed=0, estimator=exact, limits=ForecastLimits(step=0.0))
    mine = [s for s in samples if s.submit_time == last.spec.submit_time]
    assert mine
    for s in mine:
        assert s.forecast_start == pytest.approx(s.actual_start, abs=1e-6)


def held_on(jid: str, text: str, gpus: int = 1, submit: float = 0.0):
    return pend(jid, gpus, submit=submit, time_limit=100.0, dependencies=parse(text), hold_reason="Dependency",
                hold_message="waiting")


def test_a_dependent_job_is_forecast_after_the_jobs_it_awaits_complete():
    s = snap(nodes(("n1", 2)), running=[run("r", {"n1": 1}, time_limit=500.0)],
             pending=[pend("p", 1, submit=1.0, time_limit=200.0),
                      held_on("after-r", "afterok:r", submit=2.0),
                      held_on("after-both", "afterany:r:p", submit=3.0),
                      held_on("after-gone", "afterok:99", submit=4.0),
                      held_on("unless", "afternotok:r", submit=5.0)])
    before = copy.deepcopy(s)
    out = forecast_starts(make_policy("fifo"), s, 0.0, RuntimeEstimator(), limits=ForecastLimits(step=0.0))
    # p runs at once (200 s) beside r (500 s); after-gone waits on a job no longer in the cluster: it starts
    # when p ends; after-r and after-both when r ends; a job awaiting a failure never starts in a forecast.
    assert out == {"p": 0.0, "after-gone": 200.0, "after-r": 500.0, "after-both": 500.0, "unless": None}
    assert s == before


def test_an_array_with_a_limit_starts_its_held_tasks_as_its_running_ones_end():
    def task(i: int, **kw):
        return dict(array_id="a0", array_limit=2, time_limit=100.0 * (i + 1), **kw)

    s = snap(nodes(("n1", 8)), running=[run("a0", {"n1": 1}, **task(0)), run("a1", {"n1": 1}, **task(1))],
             pending=[pend(f"a{i}", 1, submit=float(i), hold_reason="JobArrayTaskLimit", **task(i)) for i in (2, 3, 4)])
    before = copy.deepcopy(s)
    out = forecast_starts(make_policy("fifo"), s, 0.0, RuntimeEstimator(), limits=ForecastLimits(step=0.0))
    # Two at once on 8 free GPUs: a2 when a0 ends (100), a3 when a1 ends (200), a4 when a2 ends (100 + 300).
    assert out == {"a2": 100.0, "a3": 200.0, "a4": 400.0}
    assert s == before


def test_the_median_of_several_futures_counts_a_start_past_the_limits_as_latest():
    runs = [{"a": 10.0, "b": None, "c": 5.0}, {"a": 30.0, "b": 7.0, "c": None}, {"a": 20.0, "b": None, "c": 6.0}]
    assert median_starts(runs) == {"a": 20.0, "b": None, "c": 6.0}
    for bad in ([], runs[:2]):
        with pytest.raises(ValueError, match="odd number of runs"):
            median_starts(bad)


def test_a_forecast_over_several_draws_is_each_job_s_median_start_over_them():
    est = RuntimeEstimator(min_runs=3)
    for r in range(60):
        est.add(FinishedRun("alice", JobClass.BE, 1, 60.0 * (1 + r % 30)))
    s = snap(nodes(("n1", 4)), running=[run(f"r{i}", {"n1": 1}, user="alice") for i in range(4)],
             pending=[pend(f"p{i}", 1 + i % 3, submit=float(i), user="alice") for i in range(6)])
    limits = ForecastLimits(step=0.0)
    single = [forecast_starts(make_policy("fitgpp"), s, 10.0, with_draw(est, k), limits=limits) for k in range(5)]
    assert len({tuple(sorted(f.items())) for f in single}) > 1  # the draws are different futures
    assert forecast_starts(make_policy("fitgpp"), s, 10.0, est, limits=limits, draws=5) == median_starts(single)
    assert forecast_starts(make_policy("fitgpp"), s, 10.0, est, limits=limits, draws=1) == single[0]
    with pytest.raises(ValueError, match="draws must be an odd number"):
        forecast_starts(make_policy("fitgpp"), s, 10.0, est, draws=2)

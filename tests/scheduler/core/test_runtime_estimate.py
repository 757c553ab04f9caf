"""Run-time estimates: owner's similar history first, then wider history (the class's,
however short), then the time limit or the class default; the limit always caps; a running job's
remaining time is conditioned on the work it has done."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.model import JobClass, JobSpec
from scheduler.core.runtime_estimate import (
    DEFAULT_RUNTIME,
    FinishedRun,
    RuntimeEstimator,
    WithReported,
    owner_of,
    spread,
    with_draw,
)

BE, TE = JobClass.BE, JobClass.TE


def spec(jid="j", cls=BE, gpus=1, user="alice", tenant="", limit=None) -> JobSpec:
    return JobSpec(jid, cls, gpus, 0.0, user=user, tenant=tenant, time_limit=limit)


def learn(est, owner, cls, gpus, runtimes):
    for r in runtimes:
        est.add(FinishedRun(owner, cls, gpus, r))


def test_a_running_job_of_a_class_without_history_is_taken_to_run_as_long_again():
    """A new cluster's first BE jobs: nothing of the class has finished. A job that has run 20 s
    is not taken to run four hours more, and one that has run two hours not a few seconds."""
    est = RuntimeEstimator(minimum=60.0)
    assert est.remaining(spec(cls=BE), 20.0) == 60.0
    assert est.remaining(spec(cls=BE), 7200.0) == 7200.0
    assert est.remaining(spec(cls=BE, limit=600.0), 20.0) == 580.0  # a limit says more
    assert est.remaining(spec(cls=BE), 0.0) == DEFAULT_RUNTIME[BE]  # not started: nothing to go on


def test_no_history_uses_time_limit_else_class_default():
    est = RuntimeEstimator()
    assert est.total(spec(limit=1234.0)) == 1234.0
    assert est.total(spec(cls=TE)) == DEFAULT_RUNTIME[TE]
    assert est.total(spec(cls=BE)) == DEFAULT_RUNTIME[BE]


def test_owner_history_of_same_size_comes_first():
    est = RuntimeEstimator(min_runs=3)
    learn(est, "alice", BE, 4, [100.0] * 5)
    learn(est, "alice", BE, 1, [900.0] * 5)
    learn(est, "bob", BE, 4, [5000.0] * 50)
    assert est.total(spec(gpus=4)) == 100.0
    assert est.total(spec(gpus=1)) == 900.0
    # Carol has no history: everyone's jobs of the class (the last 100).
    assert est.total(spec(user="carol", gpus=4)) == 5000.0


def test_too_little_owner_history_falls_back_to_the_class():
    est = RuntimeEstimator(min_runs=5)
    learn(est, "alice", BE, 2, [10.0] * 4)
    learn(est, "bob", BE, 2, [700.0] * 6)
    assert est.total(spec(gpus=2)) == 700.0


def test_a_class_with_fewer_finished_runs_than_needed_is_still_preferred_to_a_constant():
    """A new cluster: three 40-second BE runs say more than four hours of default or a padded limit."""
    est = RuntimeEstimator()  # min_runs 30
    learn(est, "alice", BE, 2, [40.0, 41.0, 46.0])
    assert est.total(spec(user="bob", gpus=4)) in (40.0, 41.0, 46.0)
    assert est.total(spec(user="bob", gpus=4, limit=7200.0)) in (40.0, 41.0, 46.0)
    assert 0 < est.remaining(spec(gpus=2), 20.0) <= 26.0
    assert est.total(spec(cls=TE)) == DEFAULT_RUNTIME[TE]  # nothing of the class finished yet


def test_time_limit_caps_history():
    est = RuntimeEstimator(min_runs=1)
    learn(est, "alice", BE, 1, [10_000.0] * 3)
    assert est.total(spec(limit=600.0)) == 600.0
    assert est.remaining(spec(limit=600.0), 500.0) == 100.0


def test_remaining_is_conditioned_on_progress():
    est = RuntimeEstimator(min_runs=1)
    learn(est, "alice", BE, 1, [100.0, 200.0, 3000.0])
    # Only the 3000 s run lasted past 1000 s of work.
    assert est.remaining(spec(), 1000.0) == 2000.0
    # Outlived every run: a quarter of the work done, at least a minute.
    assert est.remaining(spec(), 4000.0) == 1000.0
    assert est.remaining(spec(), 3000.0) == 750.0


def test_the_tenant_is_the_owner_of_a_job_without_user():
    assert owner_of(spec(user="", tenant="vc1")) == "vc1"
    est = RuntimeEstimator(min_runs=1)
    learn(est, "vc1", BE, 1, [42.0])
    assert est.total(spec(user="", tenant="vc1")) == 42.0


def test_bad_window_is_refused():
    with pytest.raises(ValueError, match="window"):
        RuntimeEstimator(window=0)


@settings(max_examples=80, deadline=None)
@given(runs=st.lists(st.floats(1.0, 1e6), max_size=30), progress=st.floats(0.0, 2e6),
       limit=st.one_of(st.none(), st.floats(1.0, 1e6)), jid=st.text(max_size=8))
def test_estimates_are_positive_and_within_the_limit(runs, progress, limit, jid):
    est = RuntimeEstimator(min_runs=1)
    learn(est, "alice", BE, 1, runs)
    rest = est.remaining(spec(jid=jid, limit=limit), progress)
    assert rest >= 1.0
    if limit is not None:
        assert rest <= max(limit - progress, 1.0)
    assert 0.0 <= spread(jid) < 1.0


def test_a_measured_remainder_replaces_the_history_for_that_job_only():
    from scheduler.core.runtime_estimate import WithReported

    est = RuntimeEstimator()
    measured = WithReported(est, {"j": 120.0, "done": 0.0})
    assert measured.remaining(spec("j"), 50.0) == 120.0
    assert measured.remaining(spec("j", limit=100.0), 50.0) == 50.0  # the time limit still caps it
    assert measured.remaining(spec("done"), 10.0) == 1.0  # at its end: one second, as every estimate
    assert measured.remaining(spec("other"), 0.0) == est.remaining(spec("other"), 0.0) == DEFAULT_RUNTIME[BE]


def test_each_set_of_draws_takes_its_own_similar_run_per_job_and_shares_the_history():
    est = RuntimeEstimator(min_runs=3)
    learn(est, "alice", BE, 1, [100.0 * (i + 1) for i in range(50)])
    jobs = [spec(f"j{i}") for i in range(40)]
    usual = [est.total(j) for j in jobs]
    assert [est.drawn(0).total(j) for j in jobs] == usual  # set 0 is the usual draw
    other = est.drawn(3)
    assert [other.total(j) for j in jobs] != usual and [est.drawn(3).total(j) for j in jobs] == [other.total(j) for j in jobs]
    assert {other.total(j) for j in jobs} <= {100.0 * (i + 1) for i in range(50)}  # always one of the similar runs
    learn(other, "bob", TE, 2, [7.0] * 5)  # the history is shared
    assert est.total(spec(cls=TE, gpus=2, user="bob")) == 7.0
    assert spread("j1", 0) == spread("j1") != spread("j1", 1)


def test_draws_pass_through_measured_remainders_and_leave_other_estimators_alone():
    est = RuntimeEstimator(min_runs=3)
    learn(est, "alice", BE, 1, [100.0 * (i + 1) for i in range(50)])
    measured = WithReported(est, {"j0": 42.0})
    drawn = with_draw(measured, 5)
    assert drawn.remaining(spec("j0"), 0.0) == 42.0
    assert drawn.remaining(spec("j1"), 0.0) == est.drawn(5).remaining(spec("j1"), 0.0)

    class Fixed:
        def remaining(self, spec, progress):  # noqa: ANN001, ANN202
            return 5.0

    fixed = Fixed()
    assert with_draw(fixed, 2) is fixed

"""``fitgpp-shrink``: a TE job that does not fit may shrink a reconfigurable
BE job instead of preempting one, whichever loses less work."""

from __future__ import annotations

from scheduler.core.decisions import Pend, Preempt, Reason, Reconfigure, Start
from scheduler.core.model import JobClass, NodeCapacity, Snapshot
from scheduler.core.policies.fitgpp_shrink import FitGppShrink
from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import pend as plain_pend
from tests.support.snapshot_builders import run as plain_run
from tests.support.fake_throughput import FakeThroughput, dp_curve, elastic_spec, running

TE = JobClass.TE
CURVE = {"dp": dp_curve(8.0, 16, 0.9)}  # close to linear: losing GPUs costs almost proportionally


def decide(running_jobs, pending_jobs, now=5000.0, nodes=(NodeCapacity("n1", 8),), **params):
    params.setdefault("explain", True)
    return FitGppShrink(**params).decide(Snapshot(list(nodes), list(running_jobs), list(pending_jobs)), now)


def kinds(decisions):
    return {(type(d).__name__, d.job_id) for d in decisions}


def test_registered():
    assert isinstance(make_policy("fitgpp-shrink"), FitGppShrink)


def test_shrinking_a_big_job_loses_less_than_preempting_it():
    # One 8-GPU BE job fills the node; a 1-GPU TE job arrives. Preempting
    # stops all 8 GPUs of work for the TE job's whole run; shrinking to 7
    # GPUs loses a little speed plus two restarts.
    be = running(elastic_spec("be", 8, FakeThroughput(CURVE, "dp", 8), grace=0.0, steps=10**6), {"n1": 8}, "dp")
    te = plain_pend("te", 1, TE, submit=4990.0)
    out = decide([be], [te])
    shrink = next(d for d in out if isinstance(d, Reconfigure))
    assert shrink.job_id == "be" and shrink.for_job == "te" and shrink.reason is Reason.SHRUNK_FOR_JOB
    assert dict(shrink.placement.parts) == {"n1": 7}
    # No grace period: the GPU is free at once, the TE job starts now.
    assert dict(next(d for d in out if isinstance(d, Start)).placement.parts) == {"n1": 1}
    assert not any(isinstance(d, Preempt) for d in out)


def test_preempting_a_small_plain_job_is_cheaper_than_shrinking_a_big_one():
    be = running(elastic_spec("be", 6, FakeThroughput(CURVE, "dp", 6), steps=10**6), {"n1": 6}, "dp")
    small = plain_run("small", {"n1": 2}, grace=0.0)
    te = plain_pend("te", 2, TE, submit=4990.0)
    # Weights that make FitGpp pick the small job (it frees no GPU too many).
    out = decide([be, small], [te], excess_weight=30.0, loss_weight=0.05)
    assert ("Preempt", "small") in kinds(out)
    assert not any(isinstance(d, Reconfigure) for d in out)


def test_a_shrink_never_makes_the_te_job_wait_longer_than_preemption_would():
    # The reconfigurable job checkpoints for 600 s; the plain victim for 30 s.
    be = running(elastic_spec("be", 6, FakeThroughput(CURVE, "dp", 6), grace=600.0, steps=10**6), {"n1": 6}, "dp")
    other = plain_run("other", {"n1": 2}, grace=30.0)
    te = plain_pend("te", 2, TE, submit=4990.0)
    out = decide([be, other], [te])
    assert not any(isinstance(d, Reconfigure) for d in out)
    assert ("Preempt", "other") in kinds(out)


def test_while_a_job_shrinks_for_a_te_job_nothing_else_is_done_for_it():
    be = running(elastic_spec("be", 8, FakeThroughput(CURVE, "dp", 8), grace=60.0, steps=10**6), {"n1": 8}, "dp",
                 reconfiguring=True, reconfigured_for="te", notice_time=4990.0, last_reconfigure=4990.0)
    te = plain_pend("te", 1, TE, submit=4980.0)
    out = decide([be], [te])
    assert not any(isinstance(d, (Preempt, Reconfigure, Start)) for d in out)
    assert next(d for d in out if isinstance(d, Pend)).reason is Reason.WAITING_FOR_PREEMPTION


def test_a_shrunk_job_grows_back_when_no_te_job_waits():
    fn = FakeThroughput(CURVE, "dp", 8)
    shrunk = running(elastic_spec("be", 8, fn, steps=10**6), {"n1": 7}, "dp", last_reconfigure=1000.0,
                     reconfigurations=1)
    out = decide([shrunk], [], now=5000.0)
    grow = next(d for d in out if isinstance(d, Reconfigure))
    assert grow.reason is Reason.GROWN and dict(grow.placement.parts) == {"n1": 8}
    # Not within the minimum interval, nor for a job nearly done.
    recent = running(elastic_spec("be", 8, fn, steps=10**6), {"n1": 7}, "dp", last_reconfigure=4900.0,
                     reconfigurations=1)
    assert not decide([recent], [], now=5000.0)
    done = running(elastic_spec("be", 8, fn, steps=1000), {"n1": 7}, "dp", steps_done=999.0,
                   last_reconfigure=1000.0, reconfigurations=1)
    assert not decide([done], [], now=5000.0)


def test_jobs_it_never_shrank_are_left_alone():
    fn = FakeThroughput(CURVE, "dp", 8)
    spread = running(elastic_spec("be", 8, fn, steps=10**6), {"n1": 4, "n2": 4}, "dp")
    assert not decide([spread], [], nodes=(NodeCapacity("n1", 8), NodeCapacity("n2", 8)))

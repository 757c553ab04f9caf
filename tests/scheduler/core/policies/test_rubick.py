"""Table-driven tests of the ``rubick`` policy on hand-made throughput functions."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Pend, Preempt, Reason, Reconfigure, Start
from scheduler.core.model import NodeCapacity, Snapshot
from scheduler.core.policies.rubick import Rubick
from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import pend as plain_pend
from tests.support.snapshot_builders import run as plain_run
from tests.support.fake_throughput import FakeThroughput, dp_curve, elastic_spec, pending, running

NODES = [NodeCapacity("n1", 8), NodeCapacity("n2", 8)]

# Plan "zero" is twice as fast as the user's "slow" at every size: the right
# size of a 4-GPU "slow" request is 2 GPUs of "zero".
SLOW = dp_curve(8.0)
TWO_PLANS = {"slow": SLOW, "zero": {g: t / 2 for g, t in SLOW.items()}}


def fn(user_gpus: int = 4, plans=None, user_plan: str = "slow") -> FakeThroughput:
    return FakeThroughput(plans or TWO_PLANS, user_plan, user_gpus)


def decide(running=(), pending=(), now=1000.0, nodes=NODES, **params):
    params.setdefault("explain", True)
    return Rubick(**params).decide(Snapshot(list(nodes), list(running), list(pending)), now)


def only(decisions, cls):
    return {d.job_id: d for d in decisions if isinstance(d, cls)}


def test_registered_and_parameters_are_checked():
    assert isinstance(make_policy("rubick"), Rubick)
    for bad in ({"restart_time": -1}, {"min_interval": "x"}, {"min_gain": 1.0}, {"be_floor": 0},
                {"start_floor": 1.5}, {"order": "random"}, {"max_preemptions": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Rubick(**bad)


@pytest.mark.parametrize(
    "case, user_gpus, plans, free_nodes, expect_gpus, expect_plan",
    [
        # A better plan reaches the requested throughput on fewer GPUs.
        ("better plan, fewer GPUs", 4, TWO_PLANS, NODES, 2, "zero"),
        # Only the user's plan: the right size is the request.
        ("own plan only", 4, {"slow": SLOW}, NODES, 4, "slow"),
        # A 12-GPU request runs faster on 8 GPUs of one node with "zero"
        # than on two nodes: the right size stays on one node.
        ("one node beats two", 12, TWO_PLANS, NODES, 5, "zero"),
    ],
)
def test_admission_at_the_right_size(case, user_gpus, plans, free_nodes, expect_gpus, expect_plan):
    f = fn(user_gpus, plans)
    job = elastic_spec("j", user_gpus, f, guaranteed=True)
    out = decide(pending=[pending(job)], nodes=free_nodes, grow=False)
    start = only(out, Start)["j"]
    assert start.placement.num_gpus == expect_gpus, case
    assert start.plan == expect_plan
    shape = [k for _, k in start.placement.parts]
    assert f.reference() / f.time(start.plan, shape) >= 1.0 - 1e-9


def test_guaranteed_job_waits_rather_than_run_below_its_request():
    f = fn(4)
    blocker = plain_run("big", {"n1": 8})
    blocker2 = plain_run("big2", {"n2": 7})
    job = elastic_spec("g", 4, f, guaranteed=True)
    out = decide(running=[blocker, blocker2], pending=[pending(job)])
    assert "g" not in only(out, Start)
    assert only(out, Pend)["g"].reason is Reason.RESOURCES
    # A best-effort job with the same request starts on the one free GPU,
    # since one GPU of "zero" still gives more than half its request.
    be = elastic_spec("b", 4, f)
    out = decide(running=[blocker, blocker2], pending=[pending(be)])
    assert only(out, Start)["b"].placement.num_gpus == 1


def test_idle_gpus_grow_a_job_when_the_gain_pays_for_the_restart():
    f = fn(4)
    job = elastic_spec("j", 4, f, steps=100_000)
    r = running(job, {"n1": 2}, "zero", steps_done=0.0)
    out = decide(running=[r], restart_time=60.0)
    grow = only(out, Reconfigure)["j"]
    assert grow.placement.num_gpus > 2 and grow.reason is Reason.GROWN
    # Nearly done: a restart costs more than the rest of the run gains.
    r_late = running(job, {"n1": 2}, "zero", steps_done=99_990.0)
    assert not only(decide(running=[r_late], restart_time=60.0), Reconfigure)


def test_no_job_is_reconfigured_within_the_minimum_interval():
    f = fn(4)
    job = elastic_spec("j", 4, f, steps=100_000)
    recent = running(job, {"n1": 2}, "zero", last_reconfigure=900.0)
    assert not only(decide(running=[recent], now=1000.0, min_interval=600.0), Reconfigure)
    old = running(job, {"n1": 2}, "zero", last_reconfigure=300.0)
    assert only(decide(running=[old], now=1000.0, min_interval=600.0), Reconfigure)


def test_rubick_asks_to_decide_again_when_the_minimum_interval_of_a_held_job_ends():
    """In the simulator nothing else may happen by then (the last jobs running), so the policy
    says when it wants to look again, as the live loop's periodic cycle would."""
    f = fn(4)
    policy = Rubick(min_interval=600.0)
    recent = running(elastic_spec("a", 4, f, steps=100_000), {"n1": 2}, "zero", last_reconfigure=900.0)
    later = running(elastic_spec("b", 4, f, steps=100_000), {"n2": 2}, "zero", last_reconfigure=950.0)
    old = running(elastic_spec("c", 4, f, steps=100_000), {"n2": 2}, "zero", last_reconfigure=100.0)
    never = running(elastic_spec("d", 4, f, steps=100_000), {"n1": 2}, "zero")
    snap = Snapshot(nodes=NODES, running=[later, recent, old, never])
    assert policy.wake_at(snap, 1000.0) == 1500.0
    assert policy.wake_at(Snapshot(nodes=NODES, running=[old, never]), 1000.0) is None
    assert policy.wake_at(snap, 1550.0) is None  # both may move now


def test_grown_job_gives_gpus_back_for_a_waiting_job():
    f = fn(4)
    grown = elastic_spec("grown", 4, f, steps=100_000)
    r = running(grown, {"n1": 8}, "zero")  # right size is 2
    other = plain_run("other", {"n2": 8})
    new = elastic_spec("new", 4, f, submit=500.0)
    out = decide(running=[r, other], pending=[pending(new)])
    shrink = only(out, Reconfigure)["grown"]
    assert shrink.reason is Reason.SHRUNK_FOR_JOB and shrink.for_job == "new"
    assert 2 <= shrink.placement.num_gpus < 8
    start = only(out, Start)["new"]
    assert start.placement.num_gpus + shrink.placement.num_gpus <= 8


def test_guaranteed_job_preempts_best_effort_work_it_cannot_shrink():
    f = fn(8, {"slow": SLOW})
    be1 = plain_run("be1", {"n1": 8})
    be2 = plain_run("be2", {"n2": 8})
    g = elastic_spec("g", 8, f, guaranteed=True)
    assert not only(decide(running=[be1, be2], pending=[pending(g)]), Preempt)  # off by default
    out = decide(running=[be1, be2], pending=[pending(g)], max_preemptions=3)
    assert set(only(out, Preempt)) in ({"be1"}, {"be2"})
    assert "g" not in only(out, Start)  # it starts once the victim has vacated
    # While the victim vacates, nobody else is preempted for it.
    vacating = plain_run("be1", {"n1": 8}, preempting=True, preempted_for="g", notice=1000.0)
    out = decide(running=[vacating, be2], pending=[pending(g)], now=1001.0, max_preemptions=3)
    assert not only(out, Preempt) and "g" not in only(out, Start)


def test_guaranteed_jobs_are_never_preempted_or_shrunk_below_their_request():
    f = fn(4)
    g_spec = elastic_spec("g", 4, f, guaranteed=True, steps=100_000)
    g_run = running(g_spec, {"n1": 8}, "zero")
    other = plain_run("other", {"n2": 8})
    g2 = elastic_spec("g2", 8, fn(8, {"slow": SLOW}), guaranteed=True, submit=10.0)
    out = decide(running=[g_run, other], pending=[pending(g2)])
    assert "g" not in only(out, Preempt)
    if "g" in only(out, Reconfigure):
        d = only(out, Reconfigure)["g"]
        shape = [k for _, k in d.placement.parts]
        assert f.reference() / f.time(d.plan, shape) >= 1.0 - 1e-9


def test_jobs_without_a_throughput_function_start_as_requested():
    job = plain_pend("plain", 3)
    out = decide(pending=[job])
    assert only(out, Start)["plain"].placement.num_gpus == 3
    assert only(out, Start)["plain"].plan == ""


def test_work_order_admits_the_smaller_job_first_and_arrival_order_the_older():
    f_small, f_big = fn(2), fn(8, {"slow": SLOW})
    small = elastic_spec("small", 2, f_small, submit=10.0, steps=10)
    big = elastic_spec("big", 8, f_big, submit=0.0, steps=10_000)
    occupied = plain_run("occ", {"n1": 8})
    occupied2 = plain_run("occ2", {"n2": 2})
    out = decide(running=[occupied, occupied2], pending=[pending(big), pending(small)], grow=False)
    assert "small" in only(out, Start)
    out = decide(running=[occupied, occupied2], pending=[pending(big), pending(small)], grow=False,
                 order="arrival", start_floor=1.0)
    assert "big" in only(out, Start) and "small" not in only(out, Start)


def test_same_snapshot_same_decisions():
    f = fn(4)
    jobs = [pending(elastic_spec(f"p{i}", 4, f, submit=float(i))) for i in range(5)]
    runs = [running(elastic_spec("r", 4, f), {"n1": 3}, "zero")]
    assert decide(running=runs, pending=jobs) == decide(running=runs, pending=jobs)


def test_explain_false_emits_no_pend():
    f = fn(4)
    out = decide(running=[plain_run("a", {"n1": 8}), plain_run("b", {"n2": 8})],
                 pending=[pending(elastic_spec("x", 4, f))], explain=False)
    assert not only(out, Pend)

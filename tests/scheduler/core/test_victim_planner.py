"""The victim planner's rules, which every preempting policy keeps: vacating
resources counted first and used once, victims only where the TE job goes
and none needless, fewest nodes, reserved nodes avoided."""

from __future__ import annotations

import pytest

from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import BE, TE, by_job, nodes, pend, pends, preempts, run, snap, starts

PREEMPTING = ["preempt-random", "preempt-newest", "fitgpp"]


@pytest.mark.parametrize("policy", PREEMPTING)
def test_waiting_for_preemption_triggers_no_second_preemption(policy):
    s = snap(
        nodes(("a", 2)),
        running=[
            run("v", {"a": 1}, grace=60, preempting=True, preempted_for="t", notice=90.0),
            run("other", {"a": 1}, grace=1),
        ],
        pending=[pend("t", 1, TE, submit=80)],
    )
    out = make_policy(policy).decide(s, 100.0)
    assert preempts(out) == {}
    assert pends(out) == {"t": "WaitingForPreemption"}
    waiting = by_job(out)["t"]
    assert waiting.message.endswith("v to vacate a") and waiting.expected_at == 150.0  # notice 90 + grace 60


@pytest.mark.parametrize("policy", PREEMPTING)
def test_two_te_jobs_never_wait_on_the_same_victim(policy):
    s = snap(
        nodes(("a", 2), ("b", 2)),
        running=[
            run("v", {"a": 1}, grace=60, preempting=True, preempted_for="t1", notice=90.0),
            run("w1", {"a": 1}, grace=30),
            run("w2", {"b": 2}, grace=30),
        ],
        pending=[pend("t1", 1, TE, submit=1), pend("t2", 1, TE, submit=2), pend("t3", 1, TE, submit=3)],
    )
    out = make_policy(policy).decide(s, 100.0)
    got = preempts(out)
    # t1 waits for its own victim; t2 and t3 each need a new one and never share.
    assert set(got) == {"w1", "w2"}
    assert sorted(got.values()) == ["t2", "t3"]
    assert pends(out)["t1"] == "WaitingForPreemption"


@pytest.mark.parametrize("policy", PREEMPTING)
def test_unclaimed_vacating_resources_are_used_once(policy):
    # "gone" vacates for a TE job that is no longer pending: whoever needs it first takes it.
    s = snap(
        nodes(("a", 1), ("b", 1)),
        running=[
            run("gone", {"a": 1}, grace=20, preempting=True, preempted_for="started_elsewhere", notice=95.0),
            run("bb", {"b": 1}, grace=20),
        ],
        pending=[pend("t1", 1, TE, submit=1), pend("t2", 1, TE, submit=2)],
    )
    out = make_policy(policy).decide(s, 100.0)
    assert preempts(out) == {"bb": "t2"}
    assert "gone" in by_job(out)["t1"].message


@pytest.mark.parametrize("policy", PREEMPTING)
def test_free_gpus_are_held_for_the_waiting_te_job(policy):
    # a has 1 free GPU; the 2-GPU TE job needs one more there; the BE job behind may not take it.
    s = snap(
        nodes(("a", 2)),
        running=[run("v", {"a": 1}, grace=30)],
        pending=[pend("t", 2, TE, submit=1), pend("be", 1, BE, submit=0)],
    )
    out = make_policy(policy).decide(s, 100.0)
    assert preempts(out) == {"v": "t"}
    assert starts(out) == {}
    assert pends(out) == {"t": "WaitingForPreemption", "be": "Resources"}


@pytest.mark.parametrize("policy", PREEMPTING)
def test_victims_are_where_the_te_job_goes_and_none_is_needless(policy):
    # Only node b can host 3 GPUs; its 1-GPU free plus two 1-GPU victims.
    s = snap(
        nodes(("a", 2), ("b", 4)),
        running=[run("a1", {"a": 2}), run("b1", {"b": 1}), run("b2", {"b": 1}), run("b3", {"b": 1})],
        pending=[pend("t", 3, TE)],
    )
    out = make_policy(policy).decide(s, 100.0)
    victims = set(preempts(out))
    assert len(victims) == 2 and victims <= {"b1", "b2", "b3"}


@pytest.mark.parametrize("policy", PREEMPTING)
def test_multi_node_te_job_preempts_on_the_fewest_nodes(policy):
    s = snap(
        nodes(("a", 4), ("b", 4), ("c", 4)),
        running=[
            run("a2", {"a": 2}, grace=30),
            run("b4", {"b": 4}, grace=30),
            run("c1", {"c": 1}, grace=30),
            run("c2", {"c": 1}, grace=30),
            run("c3", {"c": 1}, grace=30),
        ],
        pending=[pend("t", 6, TE, submit=1), pend("be", 1, BE, submit=0)],
    )
    out = make_policy(policy).decide(s, 100.0)
    got = set(preempts(out))
    # a and b: the fewest nodes that can reach 6 GPUs. Taking b4 frees enough with a's 2 free GPUs.
    assert got <= {"a2", "b4"} and "b4" in got
    if policy == "fitgpp":
        assert got == {"b4"}
    # a's free GPUs are held for the TE job: the BE job goes to c's free GPU.
    assert starts(out) == {"be": {"c": 1}}


@pytest.mark.parametrize("policy", PREEMPTING)
def test_victims_avoid_nodes_reserved_for_a_starving_job(policy):
    s = snap(
        nodes(("a", 2), ("b", 2)),
        running=[run("ra", {"a": 2}, grace=30, time_limit=50.0), run("rb", {"b": 2}, grace=30)],
        pending=[pend("big", 2, BE, submit=0), pend("t", 1, TE, submit=900)],
    )
    # a is reserved for "big" (ra declared a time limit, so a frees up first).
    out = make_policy(policy, starvation_threshold=100).decide(s, 1000.0)
    assert preempts(out) == {"rb": "t"}
    assert pends(out) == {"t": "WaitingForPreemption", "big": "Resources"}
    # With no other choice, the reserved node is used.
    s.running[1] = run("rb", {"b": 2}, TE, start=999)
    assert preempts(make_policy(policy, starvation_threshold=100).decide(s, 1000.0)) == {"ra": "t"}


def test_narrow_withdraws_candidates_and_plans_as_a_fresh_planner_would():
    from scheduler.core.placement import FreeCapacity, free_from_running
    from scheduler.core.victim_choosers import NewestChooser
    from scheduler.core.victim_planner import Planner
    from scheduler.core.victims import RunningIndex

    node_list = nodes(("a", 2), ("b", 2))
    running = [run("old", {"a": 2}, start=10.0), run("new", {"b": 2}, start=50.0)]
    job = pend("t", 2, TE, submit=90)

    def planner(without: set[str]) -> Planner:
        p = Planner(FreeCapacity(free_from_running(node_list, running)),
                    RunningIndex(running, 100.0, float("inf"), 3), {"t"}, NewestChooser())
        p.plan(job, 100.0)  # views cached before narrowing
        p.narrow(lambda c: c.id not in without, ["a", "b"])
        return p

    assert [v.id for v in planner(set()).plan(job, 100.0).victims] == ["new"]
    assert [v.id for v in planner({"new"}).plan(job, 100.0).victims] == ["old"]
    assert planner({"new", "old"}).plan(job, 100.0) is None
    untouched = planner(set())
    untouched.narrow(lambda c: c.id != "new", ["a"])  # "new" is on b, which is not named: it stays
    assert [v.id for v in untouched.plan(job, 100.0).victims] == ["new"]

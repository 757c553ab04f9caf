"""Preempting policies: which victims, and the rules every one of them keeps."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Preempt, Reason
from scheduler.core.policy import make_policy
from tests.core.helpers import BE, TE, by_job, nodes, pend, pends, preempts, run, snap, starts

PREEMPTING = ["preempt-random", "preempt-newest", "fitgpp"]


# --- victim choice: fitgpp versus preempt-newest ---------------------------------

def short_grace_vs_newest():
    """a: two old 1-GPU jobs with a 30 s grace; b: a new 2-GPU job with a 600 s grace."""
    return snap(
        nodes(("a", 2), ("b", 2)),
        running=[
            run("x1", {"a": 1}, start=0, grace=30),
            run("x2", {"a": 1}, start=10, grace=30),
            run("y", {"b": 2}, start=50, grace=600),
        ],
        pending=[pend("t", 1, TE, submit=60)],
    )


@pytest.mark.parametrize(
    "policy, victim, node",
    [
        # Newest first: y started last.
        ("preempt-newest", "y", "b"),
        # fitgpp: x1/x2 let the TE job start after 30 s (score 30 + 60 per victim = 90) while y
        # would make it wait 600 s (660); x1 and x2 tie and the job id decides.
        ("fitgpp", "x1", "a"),
    ],
)
def test_victim_choice(policy, victim, node):
    out = make_policy(policy).decide(short_grace_vs_newest(), 100.0)
    assert preempts(out) == {victim: "t"}
    assert pends(out) == {"t": "WaitingForPreemption"}
    assert f"on {node}" in by_job(out)[victim].message


def fit_choices():
    return snap(
        nodes(("a", 4), ("b", 4)),
        running=[
            run("whole", {"a": 4}, grace=10),  # shortest wait, frees 2 GPUs too many
            run("pair", {"b": 2}, grace=60),  # exactly the need
            run("one1", {"b": 1}, grace=30),
            run("one2", {"b": 1}, grace=30),  # two victims together
        ],
        pending=[pend("t", 2, TE)],
    )


@pytest.mark.parametrize(
    "params, victims, score",
    [
        # Defaults: whole 10 + 60 = 70; pair 60 + 60 = 120; one1+one2 30 + 2*60 = 150.
        ({}, {"whole"}, 70.0),
        # Penalizing excess GPUs and lost GPU-seconds makes the exact fit win:
        # whole 70 + 30*2 + 0.05*4*40 = 138; pair 120 + 0.05*2*90 = 129; pair of ones 150 + 0.05*2*60 = 156.
        ({"excess_weight": 30, "loss_weight": 0.05}, {"pair"}, 129.0),
        # With victims free of charge, the shortest wait alone decides... unless it
        # takes two: one1+one2 wait 30 < pair's 60, but whole's 10 is shorter still.
        ({"victim_weight": 0}, {"whole"}, 10.0),
        ({"victim_weight": 0, "excess_weight": 100}, {"one1", "one2"}, 30.0),
    ],
)
def test_fitgpp_weights_decide_between_wait_fit_and_count(params, victims, score):
    out = make_policy("fitgpp", **params).decide(fit_choices(), 100.0)
    assert set(preempts(out)) == victims
    assert all(f"victim score {score:.1f}" in by_job(out)[v].message for v in victims)


def test_fitgpp_prefers_victims_preempted_less_often():
    s = snap(
        nodes(("a", 1), ("b", 1)),
        running=[run("often", {"a": 1}, grace=30, preemptions=2), run("fresh", {"b": 1}, grace=60)],
        pending=[pend("t", 1, TE)],
    )
    assert preempts(make_policy("fitgpp").decide(s, 100.0)) == {"fresh": "t"}
    assert preempts(make_policy("fitgpp", repeat_weight=0).decide(s, 100.0)) == {"often": "t"}


# --- rules shared by every preempting policy --------------------------------------

@pytest.mark.parametrize("policy", PREEMPTING)
def test_running_te_jobs_are_never_victims_until_past_the_time_limit(policy):
    s = snap(
        nodes(("a", 1), ("b", 1)),
        running=[run("te_young", {"a": 1}, TE, start=900), run("te_old", {"b": 1}, TE, start=0)],
        pending=[pend("t", 1, TE, submit=950)],
    )
    out = make_policy(policy, te_time_limit=500).decide(s, 1000.0)
    assert preempts(out) == {"te_old": "t"}
    assert "past its 500 s TE time limit" in by_job(out)["te_old"].message
    out = make_policy(policy, te_time_limit=5000).decide(s, 1000.0)
    assert preempts(out) == {} and pends(out) == {"t": "Resources"}


@pytest.mark.parametrize("policy", PREEMPTING)
def test_te_limit_counts_total_work_across_attempts(policy):
    s = snap(nodes(("a", 1)), running=[run("te_resumed", {"a": 1}, TE, start=990, progress=600)], pending=[pend("t", 1, TE)])
    assert preempts(make_policy(policy, te_time_limit=500).decide(s, 1000.0)) == {"te_resumed": "t"}


@pytest.mark.parametrize("policy", PREEMPTING)
def test_pending_te_job_past_its_limit_queues_as_be(policy):
    s = snap(
        nodes(("a", 1)),
        running=[run("b", {"a": 1}, grace=5)],
        pending=[pend("was_te", 1, TE, submit=0, progress=700)],
    )
    out = make_policy(policy, te_time_limit=500).decide(s, 1000.0)
    assert preempts(out) == {} and pends(out) == {"was_te": "Resources"}


@pytest.mark.parametrize("policy", PREEMPTING)
def test_preemption_cap(policy):
    s = snap(nodes(("a", 1)), running=[run("b", {"a": 1}, preemptions=3)], pending=[pend("t", 1, TE)])
    out = make_policy(policy, max_preemptions=3).decide(s, 10.0)
    assert preempts(out) == {}
    assert pends(out) == {"t": "Resources"} and "preempted 3 times" in by_job(out)["t"].message
    assert preempts(make_policy(policy, max_preemptions=4).decide(s, 10.0)) == {"b": "t"}


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
    assert "v to vacate a; expected within 50 s" in by_job(out)["t"].message


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


def test_preempt_random_is_reproducible_and_depends_on_the_seed():
    s = snap(
        nodes(*[(f"n{i}", 1) for i in range(8)]),
        running=[run(f"b{i}", {f"n{i}": 1}, grace=10) for i in range(8)],
        pending=[pend("t", 1, TE)],
    )
    seen = set()
    for seed in range(12):
        first = make_policy("preempt-random", seed=seed).decide(s, 100.0)
        again = make_policy("preempt-random", seed=seed).decide(s, 100.0)
        assert first == again
        policy = make_policy("preempt-random", seed=seed)
        policy.decide(s, 50.0)  # earlier calls do not change later answers
        assert policy.decide(s, 100.0) == first
        seen.add(next(iter(preempts(first))))
    assert len(seen) > 1


def test_preempt_message_says_why():
    out = make_policy("preempt-newest").decide(short_grace_vs_newest(), 100.0)
    msg = next(d for d in out if isinstance(d, Preempt)).message
    assert msg == "preempted for TE job t: grace 600 s, 2 GPUs on b"
    assert next(d for d in out if isinstance(d, Preempt)).reason is Reason.PREEMPTED_FOR_TE

"""The fitgpp victim score and its search."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.model import JobClass, JobSpec, PendingJob
from scheduler.core.policies.fitgpp import DEFAULT_WEIGHTS, FitGppChooser
from scheduler.core.victim_choosers import NodeMemo, covers
from scheduler.core.victims import Candidate, Need, HostView
from tests.support.snapshot_builders import TE, by_job, nodes, pend, preempts, run, snap
from scheduler.core.policy import make_policy


def chooser(subset_limit=12, **w):
    return FitGppChooser(DEFAULT_WEIGHTS | w, 30.0, subset_limit)


def cand(jid, gpus, grace, preemptions=0, node="a", elsewhere=0):
    parts = {node: (gpus, 0.0, 0.0)}
    if elsewhere:
        parts["z"] = (elsewhere, 0.0, 0.0)
    total = gpus + elsewhere
    return Candidate(None, jid, total, grace, preemptions, 0.0, False, parts)  # type: ignore[arg-type]


def view(free, cands, vac_end=100.0, name="a"):
    return HostView(name, free, 0.0, 0.0, [], vac_end, 0, cands, True)


def need(g, now=100.0):
    return Need(PendingJob(JobSpec("t", JobClass.TE, g, 0.0)), g, 0.0, 0.0, now)


def test_score_formula_by_hand():
    c = chooser(wait_weight=2.0, victim_weight=50.0, excess_weight=7.0, loss_weight=0.1, repeat_weight=11.0)
    victims = [cand("v1", 2, 40.0, preemptions=1), cand("v2", 1, 10.0, elsewhere=1)]
    # Need 3 on a node with 1 free: deficit 2; freed 2 + 2 = 4 GPUs, excess 2.
    # wait 40; 2 victims; loss 2*(40+30) + 2*(10+30) = 220 GPU-s; 1 earlier preemption.
    expected = 2.0 * 40 + 50 * 2 + 7.0 * 2 + 0.1 * 220 + 11.0 * 1
    assert c.score(need(3), view(1, victims), victims) == pytest.approx(expected)
    # Defaults: wait 1, victim 60, excess 0, loss 0, repeat 30.
    assert chooser().score(need(3), view(1, victims), victims) == pytest.approx(40 + 60 * 2 + 30 * 1)


def test_wait_includes_jobs_already_vacating_on_the_node():
    c = chooser()
    v = [cand("v", 1, 10.0)]
    assert c.score(need(2), view(1, v, vac_end=250.0), v) == pytest.approx(150 + 60)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_exhaustive_search_finds_the_minimum(seed):
    rng = random.Random(seed)
    cands = [
        cand(f"v{i}", rng.choice([1, 1, 2, 4]), rng.choice([0.0, 10.0, 30.0, 300.0]), rng.choice([0, 0, 1, 2]),
             elsewhere=rng.choice([0, 0, 0, 2]))
        for i in range(rng.randint(1, 8))
    ]
    free = rng.randint(0, 2)
    g = rng.randint(free + 1, free + sum(c.parts["a"][0] for c in cands) + 1)
    weights = {k: rng.choice([0.0, 1.0, 30.0, 0.05]) for k in DEFAULT_WEIGHTS}
    c = chooser(**weights)
    nd, vw = need(g), view(free, cands)
    covering = [
        list(s) for k in range(1, len(cands) + 1) for s in itertools.combinations(cands, k) if covers(nd, vw, s)
    ]
    got = c.single(nd, [vw], NodeMemo())
    if not covering:
        assert got is None
        return
    best = min(
        covering, key=lambda s: (round(c.score(nd, vw, s), 9), tuple(sorted(v.id for v in s)))
    )
    assert got is not None
    _, victims, score = got
    assert score == pytest.approx(c.score(nd, vw, best))
    assert score == pytest.approx(c.score(nd, vw, victims))
    assert covers(nd, vw, victims)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_floor_is_never_above_a_rank_of_the_node(seed):
    # The planner's heap searches a node only once its floor comes out on
    # top: a floor above one of the node's ranks would skip the best node.
    # Every victim set that covers, not only the best, must rank at or above it.
    rng = random.Random(seed)
    cands = [
        cand(f"v{rng.randrange(100):02d}{i}", rng.choice([1, 1, 2, 4]), rng.choice([0.0, 10.0, 30.0, 0.1, 300.0]),
             rng.choice([0, 0, 1, 2]), elsewhere=rng.choice([0, 0, 0, 2]))
        for i in range(rng.randint(1, 7))
    ]
    free = rng.randint(0, 2)
    weights = {k: rng.choice([0.0, 1.0, 30.0, 0.05, 1 / 3]) for k in DEFAULT_WEIGHTS}
    c = chooser(**weights)
    now = rng.choice([100.0, 100.3])
    vw = view(free, cands, vac_end=rng.choice([now, now + 5.0, now + 77.7]))
    floor = c.floor(vw, now)
    assert floor[0] == round(c.bound(vw, now), 9)
    for g in range(free + 1, free + sum(x.parts["a"][0] for x in cands) + 1):
        nd = need(g, now)
        for k in range(1, len(cands) + 1):
            for s in itertools.combinations(cands, k):
                if covers(nd, vw, s):
                    victims = sorted(s, key=lambda v: v.id)
                    assert floor <= c.rank(c.score(nd, vw, victims), victims, vw.name)


def test_greedy_above_the_subset_limit_still_covers_and_prefers_cheap_victims():
    cands = [cand(f"v{i:02d}", 1, 30.0 + i) for i in range(16)]
    nd, vw = need(3), view(0, cands)
    _, victims, _ = chooser(subset_limit=12).single(nd, [vw], NodeMemo())
    assert [v.id for v in victims] == ["v00", "v01", "v02"]


def test_subset_limit_parameter_reaches_the_policy():
    s = snap(
        nodes(("a", 16)),
        running=[run(f"b{i:02d}", {"a": 1}, grace=30 + i) for i in range(16)],
        pending=[pend("t", 2, TE)],
    )
    assert preempts(make_policy("fitgpp", subset_limit=4).decide(s, 100.0)) == {"b00": "t", "b01": "t"}
    assert preempts(make_policy("fitgpp").decide(s, 100.0)) == {"b00": "t", "b01": "t"}


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


_IDS = st.lists(st.sampled_from(["a", "ab", "b", "b0", "r1", "r10", "r2"]), min_size=1, max_size=4, unique=True)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([70.0, 70.0000000001, 90.0]), _IDS, st.sampled_from(["n1", "n2"]),
       st.sampled_from([70.0, 90.0]), _IDS, st.sampled_from(["n1", "n2"]))
def test_ranks_order_as_score_then_all_victim_ids_then_node(s1, ids1, n1, s2, ids2, n2):
    # The rank splits the sorted ids into the first and the rest; it must order
    # exactly as the plain key (score to 1e-9, tuple of every id, node) does.
    c = chooser()
    v1 = [cand(i, 1, 10.0) for i in sorted(ids1)]
    v2 = [cand(i, 1, 10.0) for i in sorted(ids2)]
    plain1 = (round(s1, 9), tuple(v.id for v in v1), n1)
    plain2 = (round(s2, 9), tuple(v.id for v in v2), n2)
    r1, r2 = c.rank(s1, v1, n1), c.rank(s2, v2, n2)
    assert (r1 < r2) == (plain1 < plain2)
    assert (r1 == r2) == (plain1 == plain2)


def test_a_floor_is_below_every_rank_that_starts_with_its_least_id():
    c = chooser()
    cands = [cand("r1", 1, 10.0), cand("r2", 1, 10.0)]
    vw = view(0, cands)
    floor = c.floor(vw, 100.0)
    assert floor <= c.rank(c.score(need(1), vw, cands[:1]), cands[:1], "a")
    assert floor <= c.rank(c.score(need(2), vw, cands), cands, "a")

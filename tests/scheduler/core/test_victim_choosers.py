"""Victim choosers: newest first versus fitgpp's score, and the reproducible
random choice."""

from __future__ import annotations

import pytest

from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import TE, by_job, nodes, pend, pends, preempts, run, short_grace_vs_newest, snap


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

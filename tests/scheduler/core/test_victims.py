"""Victim candidates: TE jobs only once past the TE time limit (this attempt or
all work), and no job preempted more often than the cap."""

from __future__ import annotations

import pytest

from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import TE, by_job, nodes, pend, pends, preempts, run, snap

PREEMPTING = ["preempt-random", "preempt-newest", "fitgpp"]


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
def test_preemption_cap(policy):
    s = snap(nodes(("a", 1)), running=[run("b", {"a": 1}, preemptions=3)], pending=[pend("t", 1, TE)])
    out = make_policy(policy, max_preemptions=3).decide(s, 10.0)
    assert preempts(out) == {}
    assert pends(out) == {"t": "Resources"} and "preempted 3 times" in by_job(out)["t"].message
    assert preempts(make_policy(policy, max_preemptions=4).decide(s, 10.0)) == {"b": "t"}

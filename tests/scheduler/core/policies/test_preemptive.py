"""Preempting policies: a pending TE job past its limit queues as BE, and the
preemption message says why. The victim rules are tested with the planner
(tests/scheduler/core/test_victim_planner.py) and the candidates
(test_victims.py)."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Preempt, Reason
from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import TE, nodes, pend, pends, preempts, run, short_grace_vs_newest, snap

PREEMPTING = ["preempt-random", "preempt-newest", "fitgpp"]


@pytest.mark.parametrize("policy", PREEMPTING)
def test_pending_te_job_past_its_limit_queues_as_be(policy):
    s = snap(
        nodes(("a", 1)),
        running=[run("b", {"a": 1}, grace=5)],
        pending=[pend("was_te", 1, TE, submit=0, progress=700)],
    )
    out = make_policy(policy, te_time_limit=500).decide(s, 1000.0)
    assert preempts(out) == {} and pends(out) == {"was_te": "Resources"}


def test_preempt_message_says_why():
    out = make_policy("preempt-newest").decide(short_grace_vs_newest(), 100.0)
    msg = next(d for d in out if isinstance(d, Preempt)).message
    assert msg == "preempted for TE job t: grace 600 s, 2 GPUs on b"
    assert next(d for d in out if isinstance(d, Preempt)).reason is Reason.PREEMPTED_FOR_TE

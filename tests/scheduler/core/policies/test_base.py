"""The queue discipline every queue policy shares (policies/base.py): holds,
non-blocking fill in arrival order, explain=False."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Pend
from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import BE, TE, by_job, nodes, pend, pends, run, snap, starts, uniform

ALL = ["fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp"]


@pytest.mark.parametrize("policy", ALL)
def test_hold_reason_is_propagated(policy):
    s = snap(
        uniform(1, 8),
        pending=[
            pend("q1", 1, TE, submit=0, hold_reason="QuotaExceeded", hold_message="tenant x: 8 of 8 GPUs in use"),
            pend("q2", 1, BE, submit=1, hold_reason="QuotaExceeded"),
            pend("go", 1, BE, submit=2),
        ],
    )
    out = make_policy(policy).decide(s, 5.0)
    assert starts(out) == {"go": {"n1": 1}}
    assert pends(out) == {"q1": "QuotaExceeded", "q2": "QuotaExceeded"}
    assert by_job(out)["q1"].message == "tenant x: 8 of 8 GPUs in use"
    assert "QuotaExceeded" in by_job(out)["q2"].message


def test_unknown_hold_reason_is_a_clear_error():
    s = snap(uniform(1), pending=[pend("j", 1, hold_reason="Sleepy")])
    with pytest.raises(ValueError, match="pending job j: hold_reason 'Sleepy' is not a known reason"):
        make_policy("fifo").decide(s, 0.0)


@pytest.mark.parametrize("policy", ["fifo", "te-priority", "preempt-newest", "fitgpp"])
def test_non_blocking_jobs_behind_fill_in_arrival_order(policy):
    s = snap(
        nodes(("a", 8), ("b", 8)),
        running=[run("r1", {"a": 6}), run("r2", {"b": 5})],
        pending=[pend("j8", 8, submit=0), pend("j3", 3, submit=1), pend("j2", 2, submit=2), pend("j1", 1, submit=3)],
    )
    out = make_policy(policy).decide(s, 10.0)
    # j3 best fits b (3 free); then j2 best fits a (2 free); nothing left for j1.
    assert starts(out) == {"j3": {"b": 3}, "j2": {"a": 2}}
    assert pends(out) == {"j8": "Resources", "j1": "Resources"}
    assert "no GPU is free" in by_job(out)["j1"].message


# --- explain ------------------------------------------------------------------

@pytest.mark.parametrize("policy", ALL)
def test_explain_false_emits_no_pend_but_the_same_starts(policy):
    s = snap(
        nodes(("a", 4), ("b", 2)),
        running=[run("r", {"a": 3})],
        pending=[pend(f"j{i}", 1 + i % 3, TE if i % 4 == 0 else BE, submit=i) for i in range(12)],
    )
    full = make_policy(policy).decide(s, 50.0)
    quiet = make_policy(policy, explain=False).decide(s, 50.0)
    assert not any(isinstance(d, Pend) for d in quiet)
    assert quiet == [d for d in full if not isinstance(d, Pend)]

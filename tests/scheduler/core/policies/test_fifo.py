"""fifo and fifo-strict: non-blocking versus strict arrival order."""

from __future__ import annotations

import pytest

from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import by_job, nodes, pend, pends, run, snap, starts

# One 4-GPU node with 3 busy; queue: a 2-GPU head then 1-GPU jobs.
BLOCKED_HEAD = dict(
    node_list=nodes(("a", 4)),
    running=[run("r", {"a": 3})],
    pending=[pend("big", 2, submit=1), pend("small", 1, submit=2), pend("small2", 1, submit=3)],
)


@pytest.mark.parametrize(
    "policy, started, reasons",
    [
        # Non-blocking: the small job behind the head starts.
        ("fifo", {"small": {"a": 1}}, {"big": "Resources", "small2": "Resources"}),
        # Strict: the head blocks everything behind it.
        ("fifo-strict", {}, {"big": "Resources", "small": "Priority", "small2": "Priority"}),
    ],
)
def test_strict_versus_non_blocking_fifo(policy, started, reasons):
    s = snap(BLOCKED_HEAD["node_list"], BLOCKED_HEAD["running"], BLOCKED_HEAD["pending"])
    out = make_policy(policy).decide(s, 10.0)
    assert starts(out) == started
    assert pends(out) == reasons
    if policy == "fifo-strict":
        assert "behind job big" in by_job(out)["small"].message


def test_fifo_strict_skips_held_jobs_and_jobs_bigger_than_the_cluster():
    s = snap(
        nodes(("a", 4)),
        pending=[
            pend("held", 1, submit=0, hold_reason="QuotaExceeded", hold_message="team over its GPU quota"),
            pend("huge", 9, submit=1),
            pend("ok", 4, submit=2),
        ],
    )
    out = make_policy("fifo-strict").decide(s, 5.0)
    assert starts(out) == {"ok": {"a": 4}}
    assert pends(out) == {"held": "QuotaExceeded", "huge": "Resources"}
    assert "more than the whole cluster" in by_job(out)["huge"].message

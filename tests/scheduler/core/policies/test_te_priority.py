"""te-priority: TE jobs first, and never a preemption."""

from __future__ import annotations

from scheduler.core.decisions import Reason
from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import BE, TE, nodes, pend, pends, run, snap, starts


def test_fifo_ignores_class_and_te_priority_puts_te_first():
    # 2 free GPUs; an older BE 2-GPU job and a newer TE 2-GPU job.
    s = snap(
        nodes(("a", 4)),
        running=[run("r", {"a": 2})],
        pending=[pend("be", 2, BE, submit=1), pend("te", 2, TE, submit=2)],
    )
    assert starts(make_policy("fifo").decide(s, 3.0)) == {"be": {"a": 2}}
    out = make_policy("te-priority").decide(s, 3.0)
    assert starts(out) == {"te": {"a": 2}}
    assert pends(out) == {"be": "Resources"}


def test_te_priority_never_preempts():
    s = snap(nodes(("a", 2)), running=[run("b", {"a": 2}, grace=1)], pending=[pend("te", 1, TE)])
    out = make_policy("te-priority").decide(s, 100.0)
    assert [type(d).__name__ for d in out] == ["Pend"] and out[0].reason is Reason.RESOURCES

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


@pytest.mark.parametrize("full", [False, True])
def test_messages_read_the_same_whether_their_texts_are_cached_or_not(monkeypatch, full):
    """The grace texts are cached per value, up to a bound: past it, a new value is written out as
    before and the cache stops growing. The wait's expected end is a time beside the text."""
    from scheduler.core.policies import preemptive

    monkeypatch.setattr(preemptive, "_GRACE_TEXT", {})
    if full:
        monkeypatch.setattr(preemptive, "_TEXT_CACHE_SIZE", 0)
    for _ in range(2):  # the second time from the cache, unless it is full
        out = make_policy("fitgpp").decide(short_grace_vs_newest(), 100.0)
        preempt = next(d for d in out if isinstance(d, Preempt))
        waiting = next(d for d in out if d.job_id == "t")
        assert preempt.message.startswith("preempted for TE job t: grace 30 s, 1 GPU on a; victim score ")
        assert waiting.message == f"waiting for preempted job {preempt.job_id} to vacate a"
        assert waiting.expected_at == 130.0  # now + the victim's 30 s of grace
    assert len(preemptive._GRACE_TEXT) == (0 if full else 1)

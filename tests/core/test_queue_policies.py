"""The shared queue discipline: fifo, fifo-strict, te-priority; holds,
anti-starvation reservations, explain=False, the registry."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Pend, Reason
from scheduler.core.policy import make_policy, policy_names
from tests.core.helpers import BE, TE, by_job, nodes, pend, pends, run, snap, starts, uniform

ALL = ["fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp"]


def test_every_policy_is_registered():
    assert set(ALL) <= set(policy_names())


def test_unknown_policy_and_bad_params_are_named():
    with pytest.raises(KeyError, match="unknown policy 'nope'"):
        make_policy("nope")
    with pytest.raises(ValueError, match="starvation_threshold must be a number >= 0"):
        make_policy("fifo", starvation_threshold=-1)
    with pytest.raises(ValueError, match="max_preemptions must be an integer >= 0"):
        make_policy("fitgpp", max_preemptions=1.5)
    with pytest.raises(ValueError, match="loss_weight must be a number >= 0"):
        make_policy("fitgpp", loss_weight=-0.1)
    with pytest.raises(ValueError, match="seed must be an integer"):
        make_policy("preempt-random", seed="x")
    with pytest.raises(TypeError):
        make_policy("fifo", no_such_param=1)


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


# --- anti-starvation ---------------------------------------------------------

def starving_cluster():
    """Two 4-GPU nodes, each with 1 free GPU; a 4-GPU job waiting long; 1-GPU jobs behind."""
    return snap(
        nodes(("a", 4), ("b", 4)),
        running=[run("ra", {"a": 3}), run("rb1", {"b": 2}, time_limit=2000.0), run("rb2", {"b": 1}, time_limit=500.0)],
        pending=[pend("big", 4, submit=0), pend("s1", 1, submit=10), pend("s2", 1, submit=20)],
    )


def test_reservation_blocks_jobs_behind_the_starving_job():
    s = starving_cluster()
    out = make_policy("fifo", starvation_threshold=100).decide(s, 1000.0)
    # b reaches 4 free first: its jobs declared time limits, the job on a did not.
    assert starts(out) == {"s1": {"a": 1}}
    assert pends(out) == {"big": "Resources", "s2": "Reservation"}
    assert "b reserved for it" in by_job(out)["big"].message
    assert "reserved for job big" in by_job(out)["s2"].message


def test_below_the_threshold_there_is_no_reservation():
    out = make_policy("fifo", starvation_threshold=2000).decide(starving_cluster(), 1000.0)
    assert starts(out) == {"s1": {"a": 1}, "s2": {"b": 1}}


def test_starvation_rule_can_be_disabled():
    out = make_policy("fifo", starvation_threshold=None).decide(starving_cluster(), 10**9)
    assert set(starts(out)) == {"s1", "s2"}


def test_reservation_without_time_limits_prefers_the_node_short_of_fewest_gpus():
    s = snap(
        nodes(("a", 4), ("b", 4)),
        running=[run("ra", {"a": 2}), run("rb", {"b": 3})],
        pending=[pend("big", 4, submit=0), pend("s1", 1, submit=1), pend("s2", 1, submit=2), pend("s3", 1, submit=3)],
    )
    out = make_policy("te-priority", starvation_threshold=60).decide(s, 1000.0)
    # a is short of 2 GPUs, b of 3: a is reserved, the small jobs fill b.
    assert starts(out) == {"s1": {"b": 1}}
    assert pends(out) == {"big": "Resources", "s2": "Reservation", "s3": "Reservation"}


def test_reservation_for_a_multi_node_job_takes_the_emptiest_nodes():
    s = snap(
        nodes(("a", 4), ("b", 4), ("c", 4)),
        running=[run("ra", {"a": 3}), run("rb", {"b": 1}), run("rc", {"c": 2})],
        pending=[pend("big", 8, submit=0), pend("s1", 2, submit=1), pend("s2", 1, submit=2)],
    )
    out = make_policy("fifo", starvation_threshold=60).decide(s, 1000.0)
    # b (3 free) and c (2 free) are reserved; only a's free GPU is left to others.
    assert starts(out) == {"s2": {"a": 1}}
    assert pends(out) == {"big": "Resources", "s1": "Reservation"}


def test_te_jobs_may_use_free_gpus_on_reserved_nodes():
    s = starving_cluster()
    s.pending.append(pend("te", 1, TE, submit=30))
    out = make_policy("te-priority", starvation_threshold=100).decide(s, 1000.0)
    assert starts(out) == {"te": {"a": 1}}
    out = make_policy("te-priority", starvation_threshold=100).decide(
        snap(s.nodes, s.running, [pend("big", 4, submit=0), pend("te", 2, TE, submit=30)]), 1000.0
    )
    assert starts(out) == {"te": {"a": 1, "b": 1}}


def test_starving_job_that_fits_just_starts():
    s = snap(nodes(("a", 4)), pending=[pend("old", 4, submit=0), pend("new", 1, submit=1)])
    out = make_policy("fifo", starvation_threshold=1).decide(s, 1000.0)
    assert starts(out) == {"old": {"a": 4}}


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

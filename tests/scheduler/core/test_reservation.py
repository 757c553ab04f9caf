"""Anti-starvation reservations: a job waiting past the threshold has nodes
reserved for it, which only TE jobs may still use."""

from __future__ import annotations

from scheduler.core.policy import make_policy
from tests.support.snapshot_builders import TE, by_job, nodes, pend, pends, run, snap, starts


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


def test_the_reservation_messages_stay_the_same_while_the_starving_job_waits():
    """Said once, not every minute: a text that followed the clock rewrote every such job's row."""
    s = starving_cluster()
    early, late = ({d.job_id: d.message for d in make_policy("fifo", starvation_threshold=100).decide(s, now)}
                   for now in (1000.0, 9000.0))
    assert early["big"] == late["big"] == ("waited past the 100 s starvation threshold: b reserved for it; "
                                           "no other job of its queue starts there until it does")
    assert early["s2"] == late["s2"] == "would fit only on b, reserved for job big"


def test_once_nothing_can_start_each_job_behind_gets_its_own_reason():
    # The queue's tail is judged once per shape; a job that excludes the
    # reserved node is not "blocked by the reservation", whatever its shape.
    s = snap(
        nodes(("a", 4), ("b", 4)),
        running=[run("ra", {"a": 4}), run("rb1", {"b": 2}, time_limit=2000.0)],
        pending=[pend("big", 4, submit=0), pend("s1", 2, submit=10), pend("s2", 2, submit=20),
                 pend("x", 2, submit=30, excluded_nodes=frozenset({"b"})), pend("s3", 2, submit=40),
                 pend("h", 2, submit=50, hold_reason="QuotaExceeded")],
    )
    out = make_policy("fifo", starvation_threshold=100, explain=True).decide(s, 1000.0)
    assert starts(out) == {}
    assert pends(out) == {"big": "Resources", "s1": "Reservation", "s2": "Reservation", "x": "Resources",
                          "s3": "Reservation", "h": "QuotaExceeded"}


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


def test_a_multi_node_reservation_takes_most_free_first_then_names_until_capacity_holds_it():
    """Too big for any node: nodes by free units, most first, ties by name,
    taken until their capacity (not their free GPUs) holds the job. With CPUs
    per GPU the free units, not the free GPUs, decide."""
    from scheduler.core.placement import FreeCapacity
    from scheduler.core.reservation import reserve

    cluster = nodes(("d", 4, 8.0, 64.0), ("c", 4, 8.0, 64.0), ("b", 8, 8.0, 64.0), ("a", 4, 8.0, 64.0))
    running = [run("rb", {"b": 6}), run("rd", {"d": 2}), run("rc", {"c": 2})]
    cap = FreeCapacity.of(cluster, running, None)
    # Free GPUs: a 4, then b, c, d 2 each (by name); a's capacity 4 + b's 8 = 12 hold 10.
    r = reserve(pend("big", 10, submit=0), cluster, cap, running, 500.0)
    assert r is not None and r.nodes == frozenset({"a", "b"}) and r.job_id == "big"
    # 14 GPUs: a, b, then c before d (tie on 2 free, by name).
    assert reserve(pend("big", 14, submit=0), cluster, cap, running, 500.0).nodes == frozenset({"a", "b", "c"})
    # 4 CPUs per GPU: the 8-CPU nodes hold 2 units each, b's 2 free GPUs 2 units, a's 4 free GPUs 2.
    assert reserve(pend("big", 5, submit=0, num_cpus=20), cluster, cap, running, 500.0).nodes == frozenset({"a", "b", "c"})
    assert reserve(pend("huge", 9, submit=0, num_cpus=36), cluster, cap, running, 500.0) is None

"""Random small clusters, running sets and queues for the policy property
tests (hypothesis): ``scenarios()`` draws a policy of ``POLICIES`` with its
parameters, a snapshot, the time and the free capacity per node."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, RunningJob, Snapshot
from scheduler.core.placement import FreeCapacity, FreeLedger

POLICIES = ["fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp"]
PREEMPTING = {"preempt-random", "preempt-newest", "fitgpp"}


@st.composite
def scenarios(draw):
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    n_nodes = rng.randint(1, 4)
    track = draw(st.booleans())
    nodes = [
        NodeCapacity(f"n{i}", rng.choice([1, 2, 4, 4, 8]), rng.choice([16.0, 32.0]) if track else 0.0, rng.choice([64.0, 0.0]) if track else 0.0)
        for i in range(n_nodes)
    ]
    now = 10_000.0
    policy = POLICIES[draw(st.integers(0, len(POLICIES) - 1))]
    te_time_limit = rng.choice([100.0, 3600.0])
    max_preemptions = rng.choice([0, 1, 3, 3])
    n_pending = rng.randint(0, 8)
    pending = []
    t = 0.0
    for i in range(n_pending):
        t += rng.choice([0.0, 1.0, 500.0, 3000.0])
        cls = rng.choice([JobClass.TE, JobClass.TE, JobClass.BE])
        spec = JobSpec(
            f"p{i}", cls, rng.choice([1, 1, 1, 2, 2, 3, 4, 8, 12]), t,
            num_cpus=rng.choice([0.0, 0.0, 4.0, 10.0]), mem_gb=rng.choice([0.0, 0.0, 24.0]),
            grace_period=rng.choice([0.0, 30.0, 300.0]),
        )
        hold = "QuotaExceeded" if rng.random() < 0.15 else None
        pending.append(PendingJob(spec, progress=rng.choice([0.0, 0.0, 200.0]), hold_reason=hold))
    te_ids = [p.spec.id for p in pending if p.spec.job_class is JobClass.TE]
    ledger = FreeLedger(nodes)
    cap = FreeCapacity(ledger.free)
    running = []
    for i in range(rng.randint(0, 30)):
        cls = rng.choice([JobClass.TE, JobClass.BE, JobClass.BE])
        spec = JobSpec(
            f"r{i}", cls, rng.choice([1, 1, 2, 4]), rng.uniform(0, now),
            num_cpus=rng.choice([0.0, 2.0, 8.0]), mem_gb=rng.choice([0.0, 16.0]),
            grace_period=rng.choice([0.0, 10.0, 60.0, 600.0]), time_limit=rng.choice([None, 5000.0]),
        )
        placement = cap.place(spec)
        if placement is None:
            continue
        cap.take(spec, placement)
        ledger.hold(spec, placement)
        start = rng.uniform(0, now)
        preempting = rng.random() < 0.15
        running.append(
            RunningJob(
                spec, placement, start, start, progress=rng.uniform(0, now - start),
                preemptions=rng.choice([0, 1, 2, 3]), preempting=preempting,
                preempted_for=(rng.choice(te_ids + [None, "gone"]) if preempting else None),
                notice_time=(rng.uniform(start, now) if preempting else None),
            )
        )
    params = {"explain": True}
    if policy != "fifo-strict":
        params["starvation_threshold"] = rng.choice([None, 1000.0, 10**6])
    if policy in PREEMPTING:
        params |= {"te_time_limit": te_time_limit, "max_preemptions": max_preemptions}
    if policy == "preempt-random":
        params["seed"] = rng.randrange(100)
    return policy, params, Snapshot(nodes, running, pending), now, dict(ledger.free)

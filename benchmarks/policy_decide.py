"""Per-call cost of ``decide()`` on a large synthetic snapshot.

A 64 x 8 = 512-GPU cluster with a few hundred running jobs and 2,000 pending
jobs (20 % TE), in several situations: cluster full (the common case under
contention), a few GPUs free, and a TE job that needs preemption. Each policy
is timed with and without ``explain``, and with the optional snapshot indexes
``free`` and ``pending_te`` given (as the simulator can) or derived by the
policy from ``running`` and ``pending`` (as in the live loop).

Usage::

    python benchmarks/policy_decide.py [--pending 2000] [--repeat 200] [--json FILE] [--profile POLICY]

``--profile`` prints the cProfile top functions for one policy on the
"full" situation. Timings are wall-clock medians on this machine: compare
them relative to each other, not across machines.

``--nodes N`` switches to one large pure snapshot shaped like
benchmarks/cycle_scale.py's first cycle (no database): N nodes x 8 GPUs,
``--busy`` (0.9) of the GPUs held by running BE jobs of 1, 2, 4 or 8 GPUs
(one node each, grace 10-300 s), ``--pending`` jobs of which ``--te-share``
(0.2) are TE jobs of 1-2 GPUs; only ``--policies`` (default fitgpp) are
timed, median of ``--repeat`` calls (wall clock, and CPU time of the process,
which other load on a shared machine inflates less)::

    python benchmarks/policy_decide.py --nodes 1000 --pending 10000 --te-share 0.2 --repeat 5

With ``--tenants K`` the snapshot carries fair share: K projects of equal share with decayed usage
100,000 x (1..K) GPU-seconds, the running jobs charged to them unevenly (weights K..1, so the
first borrows) and the pending jobs the other way round (1..K), each job to one of 20 users::

    python benchmarks/policy_decide.py --nodes 1000 --pending 10000 --tenants 4 --repeat 5

``--morphling CSV`` times every ``decide()`` of a whole simulated run of a
Rubick workload on the 8 x 8-GPU testbed (``--policies rubick``): median,
99th percentile and maximum, wall clock and CPU::

    python benchmarks/policy_decide.py --morphling ../shared/traces/morphling/workloads/workload-base.csv --policies rubick

``--snapshot FILE`` times ``decide()`` on the live loop's own snapshot, as
``benchmarks/cycle_scale.py --save-snapshot FILE`` wrote it from its database
(the first cycle after its fill), with the collector paused as the loop runs
it: median and least of ``--repeat`` calls, wall clock and CPU. The file is a
pickle: load only one you wrote::

    python benchmarks/cycle_scale.py --nodes 5000 --runs 1 --no-forecast --save-snapshot cycle5000.pickle
    python benchmarks/policy_decide.py --snapshot cycle5000.pickle --repeat 7
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot  # noqa: E402
from scheduler.core.placement import FreeCapacity, FreeLedger  # noqa: E402
from scheduler.core.policy import make_policy, policy_names  # noqa: E402

NOW = 1_000_000.0


def build(pending_count: int, free_gpus: int, seed: int = 1) -> tuple[list[NodeCapacity], list[RunningJob], list[PendingJob]]:
    """Fill 64 x 8 GPUs with running jobs except ``free_gpus``; ``pending_count`` jobs wait."""
    rng = random.Random(seed)
    nodes = [NodeCapacity(f"n{i:02d}", 8, 64.0, 512.0) for i in range(64)]
    ledger = FreeLedger(nodes)
    cap = FreeCapacity(ledger.free)
    running: list[RunningJob] = []
    i = 0
    while cap.total_gpus > free_gpus:
        g = min(rng.choice([1, 1, 1, 1, 2, 4, 8]), cap.total_gpus - free_gpus)
        cls = JobClass.TE if rng.random() < 0.2 else JobClass.BE
        spec = JobSpec(f"r{i}", cls, g, NOW - rng.uniform(0, 86400), num_cpus=4.0 * g, mem_gb=32.0 * g,
                       grace_period=rng.choice([10.0, 30.0, 60.0, 120.0, 300.0]))
        i += 1
        placement = cap.place(spec)
        if placement is None:
            continue
        cap.take(spec, placement)
        ledger.hold(spec, placement)
        start = NOW - rng.uniform(0, 20000)
        running.append(RunningJob(spec, placement, start, start, progress=NOW - start,
                                  preemptions=rng.choice([0, 0, 0, 1, 2, 3])))
    pending = []
    t = NOW - 50_000.0
    for k in range(pending_count):
        t += rng.uniform(0, 20)
        cls = JobClass.TE if rng.random() < 0.2 else JobClass.BE
        g = rng.choice([1, 1, 1, 2, 4, 8, 16]) if cls is JobClass.BE else rng.choice([1, 1, 2])
        pending.append(PendingJob(JobSpec(f"p{k}", cls, g, t, num_cpus=4.0 * g, mem_gb=32.0 * g, grace_period=60.0)))
    return nodes, running, pending


def situations(pending_count: int) -> dict[str, tuple[list[NodeCapacity], list[RunningJob], list[PendingJob]]]:
    full = build(pending_count, 0)
    few_free = build(pending_count, 6)
    # One new TE job at the head of the TE queue, cluster full: preemption planning every call.
    nodes, running, pending = full
    te_first = [PendingJob(JobSpec("te-new", JobClass.TE, 2, NOW - 60_000.0, num_cpus=8.0, mem_gb=64.0))]
    be_only = [p for p in pending if p.spec.job_class is JobClass.BE]
    return {"full": full, "few_free": few_free, "te_needs_preemption": (nodes, running, te_first + be_only)}


def build_scale(nodes_count: int, busy: float, pending_count: int, te_share: float,
                seed: int = 1) -> tuple[list[NodeCapacity], list[RunningJob], list[PendingJob]]:
    """The cycle_scale.py cluster as a pure snapshot (see the module doc)."""
    rng = random.Random(seed)
    nodes = [NodeCapacity(f"node-{i:05d}", 8, 64.0, 512.0) for i in range(nodes_count)]
    target = int(busy * nodes_count * 8)
    running: list[RunningJob] = []
    held = 0
    for node in nodes:
        index = 0
        while index < 8 and held < target:
            size = min(rng.choice([1, 2, 4, 8]), 8 - index, target - held)
            start = NOW - rng.uniform(60, 20000)
            spec = JobSpec(f"r{len(running)}", JobClass.BE, size, start, grace_period=rng.choice([10.0, 30.0, 60.0, 300.0]))
            running.append(RunningJob(spec, Placement(((node.name, size),)), start, start, progress=NOW - start))
            index += size
            held += size
    pending = []
    t = NOW - 2.0 * pending_count
    for k in range(pending_count):
        te = rng.random() < te_share
        g = rng.choice([1, 1, 2]) if te else rng.choice([1, 1, 2, 4, 8])
        pending.append(PendingJob(JobSpec(f"p{k}", JobClass.TE if te else JobClass.BE, g, t + 2.0 * k, grace_period=30.0)))
    return nodes, running, pending


def with_tenants(nodes: list[NodeCapacity], running: list[RunningJob], pending: list[PendingJob], k: int,
                 seed: int = 7) -> Snapshot:
    """The fair-share variant of a ``build_scale`` cluster (module doc, ``--tenants``)."""
    import dataclasses

    from scheduler.core.fairshare import TenantUsage

    rng = random.Random(seed)
    names = [f"p{i}" for i in range(k)]

    def charged(job, weights):  # noqa: ANN001, ANN202 - a RunningJob or a PendingJob
        spec = dataclasses.replace(job.spec, tenant=rng.choices(names, weights)[0], user=f"u{rng.randrange(20)}")
        return dataclasses.replace(job, spec=spec)

    running = [charged(r, range(k, 0, -1)) for r in running]
    pending = [charged(p, range(1, k + 1)) for p in pending]
    tenants = {t: TenantUsage(1.0, 1e5 * (i + 1), {}) for i, t in enumerate(names)}
    return Snapshot(nodes, running, pending, tenants=tenants)


def scale_main(args: argparse.Namespace) -> int:
    nodes, running, pending = build_scale(args.nodes, args.busy, args.pending, args.te_share)
    snap = with_tenants(nodes, running, pending, args.tenants) if args.tenants else Snapshot(nodes, running, pending)
    rows = []
    for name in args.policies.split(","):
        policy = make_policy(name)
        out = policy.decide(snap, NOW)
        kinds: dict[str, int] = {}
        for d in out:
            kinds[type(d).__name__] = kinds.get(type(d).__name__, 0) + 1
        median, cpu = time_call(policy, snap, args.repeat, cpu=True)
        rows.append({"policy": name, "nodes": len(nodes), "running": len(running), "pending": len(pending),
                     "decisions": kinds, "median_s": round(median, 4), "cpu_median_s": round(cpu, 4),
                     "repeat": args.repeat, "loadavg": os.getloadavg()[0]})
        print(f"{name:10s} nodes={len(nodes)} running={len(running)} pending={len(pending)} "
              f"decisions={kinds} median {median:.4f} s/call (CPU {cpu:.4f} s; load average {os.getloadavg()[0]:.1f})")
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "policy_decide", "mode": "scale", "rows": rows}, indent=2))
    return 0


def morphling_main(args: argparse.Namespace) -> int:
    """Every ``decide()`` of a whole simulated run of a Rubick workload on the
    8 x 8-GPU testbed, timed one by one (the sizes a reconfiguring policy
    meets in practice: tens of jobs, not thousands)."""
    from scheduler.sim.cluster import make_nodes
    from scheduler.sim.morphling import TESTBED, load_morphling
    from scheduler.sim.records import SimConfig
    from scheduler.sim.runner import build_policy, parse_policy_spec, run_policy

    workload = load_morphling(args.morphling)
    nodes = make_nodes(TESTBED[0], TESTBED[1], TESTBED[2], TESTBED[3])
    rows = []
    for name in args.policies.split(","):
        spec = parse_policy_spec(name)
        config = SimConfig()
        policy = build_policy(spec, config.resume_overhead, config.reconfigure_overhead)
        inner = policy.decide
        calls: list[tuple[float, float, int, int]] = []

        def timed(snap: Snapshot, now: float, inner=inner, calls=calls):
            c0, t0 = time.process_time(), time.perf_counter()
            out = inner(snap, now)
            calls.append((time.perf_counter() - t0, time.process_time() - c0, len(snap.running), len(snap.pending)))
            return out

        policy.decide = timed  # type: ignore[method-assign]
        run_policy(spec, workload, nodes, config, policy=policy)
        wall = sorted(c[0] for c in calls)
        cpu = sorted(c[1] for c in calls)
        row = {
            "policy": name, "workload": str(args.morphling), "calls": len(calls),
            "median_s": round(statistics.median(wall), 4), "p99_s": round(wall[int(0.99 * (len(wall) - 1))], 4),
            "max_s": round(wall[-1], 4), "cpu_median_s": round(statistics.median(cpu), 4),
            "cpu_p99_s": round(cpu[int(0.99 * (len(cpu) - 1))], 4), "cpu_max_s": round(cpu[-1], 4),
            "max_running": max(c[2] for c in calls), "max_pending": max(c[3] for c in calls),
            "loadavg": os.getloadavg()[0],
        }
        rows.append(row)
        print(f"{name:10s} calls={row['calls']} running<={row['max_running']} pending<={row['max_pending']} "
              f"median {row['median_s']:.4f} p99 {row['p99_s']:.4f} max {row['max_s']:.4f} s "
              f"(CPU {row['cpu_median_s']:.4f} / {row['cpu_p99_s']:.4f} / {row['cpu_max_s']:.4f}; "
              f"load average {row['loadavg']:.1f})")
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "policy_decide", "mode": "morphling", "rows": rows}, indent=2))
    return 0


def snapshot_main(args: argparse.Namespace) -> int:
    """Time ``decide()`` on a snapshot saved by cycle_scale.py (see the module doc)."""
    import gc
    import pickle

    saved = pickle.loads(args.snapshot.read_bytes())
    snap, now = saved["snapshot"], saved["now"]
    rows = []
    for name in args.policies.split(","):
        policy = make_policy(name)
        wall, cpu = [], []
        gc.disable()  # as scheduler.loop.gc_paused does for a cycle
        try:
            for _ in range(args.repeat):
                out = None  # the previous call's decisions, freed before the clock starts
                c0, t0 = time.process_time(), time.perf_counter()
                out = policy.decide(snap, now)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        finally:
            gc.enable()
        kinds: dict[str, int] = {}
        for d in out:
            kinds[type(d).__name__] = kinds.get(type(d).__name__, 0) + 1
        row = {"policy": name, "nodes": len(snap.nodes), "running": len(snap.running), "pending": len(snap.pending),
               "decisions": kinds, "median_s": round(statistics.median(wall), 4), "least_s": round(min(wall), 4),
               "cpu_median_s": round(statistics.median(cpu), 4), "cpu_least_s": round(min(cpu), 4),
               "repeat": args.repeat, "loadavg": os.getloadavg()[0]}
        rows.append(row)
        print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "policy_decide", "mode": "snapshot", "rows": rows}, indent=2))
    return 0


def time_call(policy, snap: Snapshot, repeat: int, cpu: bool = False):
    """Median wall-clock seconds of ``repeat`` calls; with ``cpu``, also the
    median CPU seconds of this process (less sensitive to other load on a
    shared machine), as a pair."""
    samples = []
    cpu_samples = []
    for _ in range(repeat):
        c0 = time.process_time()
        t0 = time.perf_counter()
        out = policy.decide(snap, NOW)
        samples.append(time.perf_counter() - t0)
        cpu_samples.append(time.process_time() - c0)
        del out  # freed outside the timing, as the loop frees a cycle's decisions after applying them
    if cpu:
        return statistics.median(samples), statistics.median(cpu_samples)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--profile", metavar="POLICY")
    ap.add_argument("--nodes", type=int, help="time one large snapshot of this many 8-GPU nodes instead")
    ap.add_argument("--busy", type=float, default=0.9, help="with --nodes: share of GPUs held by running jobs")
    ap.add_argument("--te-share", type=float, default=0.2, help="with --nodes: share of pending jobs that are TE")
    ap.add_argument("--tenants", type=int, default=0, help="with --nodes: fair share among this many projects")
    ap.add_argument("--policies", default="fitgpp", help="with --nodes or --morphling: comma-separated policies to time")
    ap.add_argument("--snapshot", type=Path, metavar="FILE",
                    help="time decide() on a snapshot written by cycle_scale.py --save-snapshot (a pickle)")
    ap.add_argument("--morphling", type=Path, metavar="CSV",
                    help="time every decide() of a simulated run of this Rubick workload instead")
    args = ap.parse_args(argv)
    if args.pending < 0 or args.repeat < 1:
        ap.error("--pending must be >= 0 and --repeat >= 1")
    if args.morphling is not None:
        return morphling_main(args)
    if args.snapshot is not None:
        return snapshot_main(args)
    if args.nodes is not None:
        if args.nodes < 1 or not 0.0 <= args.busy <= 1.0 or not 0.0 <= args.te_share <= 1.0:
            ap.error("--nodes must be >= 1, --busy and --te-share between 0 and 1")
        if args.tenants < 0:
            ap.error("--tenants must be >= 0")
        return scale_main(args)

    cases = situations(args.pending)
    rows = []
    for situation, (nodes, running, pending) in cases.items():
        ledger = FreeLedger(nodes)
        for r in running:
            ledger.hold(r.spec, r.placement)
        pending_te = [p for p in pending if p.spec.job_class is JobClass.TE]
        for free_given in (True, False):
            snap = Snapshot(nodes, running, pending, dict(ledger.free), pending_te) if free_given else Snapshot(
                nodes, running, pending
            )
            for name in policy_names():
                for explain in (True, False):
                    policy = make_policy(name, explain=explain)
                    out = policy.decide(snap, NOW)
                    us = time_call(policy, snap, args.repeat) * 1e6
                    rows.append({
                        "situation": situation, "policy": name, "explain": explain, "indexes_given": free_given,
                        "running": len(running), "pending": len(pending), "decisions": len(out),
                        "median_us": round(us, 1),
                    })
                    print(f"{situation:20s} {name:15s} explain={explain!s:5s} indexes={free_given!s:5s} "
                          f"running={len(running):4d} pending={len(pending):5d} decisions={len(out):5d} "
                          f"median {us:9.1f} us/call")
    if args.profile:
        nodes, running, pending = cases["full"]
        snap = Snapshot(nodes, running, pending)
        policy = make_policy(args.profile)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.repeat):
            policy.decide(snap, NOW)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "policy_decide", "cluster": "64x8", "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

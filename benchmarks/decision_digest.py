"""Digests of the decisions the policies make on many random snapshots, to show
that a change to the scheduling core leaves every decision as it was.

Run it once with the scheduler package of each commit and compare::

    mkdir -p /tmp/before/benchmarks
    git archive <old-commit> scheduler | tar -x -C /tmp/before
    cp benchmarks/decision_digest.py benchmarks/policy_decide.py /tmp/before/benchmarks/
    .venv/bin/python /tmp/before/benchmarks/decision_digest.py --json before.json
    .venv/bin/python benchmarks/decision_digest.py --json after.json
    .venv/bin/python benchmarks/decision_digest.py --compare before.json after.json

The script imports the ``scheduler`` package next to its own folder, so the
copy in the export runs the old code. Each case is one snapshot, one policy
with its parameters, ``explain`` on or off, and the snapshot indexes
(``free``, ``pending_te``) given or derived; its digest is the SHA-256 of the
``repr`` of the decision list, so any change in a decision, its order, reason
or message shows.

Snapshots (``--seeds A:B``, default 0:120): random clusters of 3 to 200 nodes
of 4 or 8 GPUs, CPU and memory tracked on half of them; running jobs of 1-16
GPUs (some spread over nodes, some TE jobs past the TE time limit, some
vacating for a pending TE job, for none or for a job that is gone, preempted
0-3 times before) filling 60-100 % of the GPUs; 5-1,500 pending jobs, some held
for quota, some larger than the cluster, some past the starvation threshold.
Every tenth seed also gives a snapshot shaped like ``policy_decide.py --nodes``
(10-300 nodes, 2,000 pending); ``--big`` adds that benchmark's 1,000-node,
10,000-job snapshot (fitgpp, te-priority, fifo only).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from policy_decide import build_scale  # noqa: E402

from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, RunningJob, Snapshot  # noqa: E402
from scheduler.core.placement import FreeCapacity, FreeLedger  # noqa: E402
from scheduler.core.policy import make_policy  # noqa: E402

TE, BE = JobClass.TE, JobClass.BE

FITGPP_PARAMS = [
    {},
    {"excess_weight": 10.0, "loss_weight": 0.001},
    {"victim_weight": 0.0, "repeat_weight": 0.0, "subset_limit": 3},
    {"starvation_threshold": 1000.0},
    {"starvation_threshold": None, "max_preemptions": 1, "te_time_limit": 100.0},
]
CASES = (
    [(name, {}) for name in ("fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp-shrink")]
    + [("fitgpp", p) for p in FITGPP_PARAMS]
    + [("te-priority", {"starvation_threshold": 1000.0}), ("fifo", {"starvation_threshold": 1000.0})]
)
BIG_CASES = [("fitgpp", {}), ("te-priority", {}), ("fifo", {})]


def random_snapshot(seed: int) -> tuple[list[NodeCapacity], list[RunningJob], list[PendingJob], float]:
    """One random cluster, running set and queue (see the module doc)."""
    rng = random.Random(seed)
    now = 100_000.0
    track = rng.random() < 0.5
    n = rng.randint(3, 200)
    nodes = [
        NodeCapacity(f"n{i:03d}", rng.choice([4, 8, 8, 8]), rng.choice([32.0, 64.0]) if track else 0.0,
             rng.choice([0.0, 256.0]) if track else 0.0)
        for i in range(n)
    ]
    pending = []
    t = now - 40_000.0
    for k in range(rng.randint(5, 1500)):
        t += rng.choice([0.0, 1.0, 7.0, 30.0])
        cls = TE if rng.random() < rng.choice([0.1, 0.3, 0.6]) else BE
        g = rng.choice([1, 1, 2, 4]) if cls is TE else rng.choice([1, 1, 2, 4, 8, 12, 16, 64, 4096])
        spec = JobSpec(f"p{k:04d}", cls, g, t if rng.random() < 0.98 else t - 30_000.0,
                       num_cpus=rng.choice([0.0, 0.0, 4.0 * g, 10.0]), mem_gb=rng.choice([0.0, 0.0, 24.0 * g]),
                       grace_period=rng.choice([0.0, 30.0, 60.0]))
        hold = "QuotaExceeded" if rng.random() < 0.05 else None
        pending.append(PendingJob(spec, progress=rng.choice([0.0, 0.0, 0.0, 5000.0]), preemptions=rng.choice([0, 0, 1]),
                                  hold_reason=hold))
    pending.sort(key=lambda p: (p.spec.submit_time, p.spec.id))
    te_ids = [p.spec.id for p in pending if p.spec.job_class is TE]
    cap = FreeCapacity(FreeLedger(nodes).free)
    running = []
    busy = rng.choice([0.6, 0.9, 0.97, 1.0])
    total = sum(x.gpus for x in nodes)
    tries = 0
    while cap.total_gpus > total * (1 - busy) and tries < 20 * n:
        tries += 1
        cls = TE if rng.random() < 0.15 else BE
        g = rng.choice([1, 1, 2, 4, 8, 16])
        spec = JobSpec(f"r{len(running):04d}", cls, g, rng.uniform(0, now), num_cpus=rng.choice([0.0, 2.0 * g, 8.0]),
                       mem_gb=rng.choice([0.0, 16.0 * g]), grace_period=rng.choice([0.0, 10.0, 30.0, 60.0, 300.0]))
        placement = cap.place(spec)
        if placement is None:
            continue
        cap.take(spec, placement)
        start = now - rng.uniform(10, 20_000)
        vacating = rng.random() < 0.05
        running.append(RunningJob(
            spec, placement, start, start, progress=now - start, preemptions=rng.choice([0, 0, 1, 2, 3]),
            preempting=vacating, preempted_for=(rng.choice(te_ids + [None, "gone"]) if vacating else None),
            notice_time=(now - rng.uniform(0, 100) if vacating else None),
        ))
    return nodes, running, pending, now


def digest_cases(tag: str, nodes, running, pending, now: float, cases, out: dict[str, list]) -> None:
    """Every case of one snapshot: policy x parameters x explain x indexes."""
    ledger = FreeLedger(nodes)
    for r in running:
        ledger.hold(r.spec, r.placement)
    te = [p for p in pending if p.spec.job_class is TE]
    snaps = {"derived": Snapshot(nodes, running, pending), "indexes": Snapshot(nodes, running, pending, ledger.free, te)}
    for sname, snap in snaps.items():
        for name, params in cases:
            for explain in (True, False):
                decisions = make_policy(name, explain=explain, **params).decide(snap, now)
                key = f"{tag}/{sname}/{name}/{json.dumps(params, sort_keys=True)}/explain={explain}"
                kinds: dict[str, int] = {}
                for d in decisions:
                    kinds[type(d).__name__] = kinds.get(type(d).__name__, 0) + 1
                out[key] = [hashlib.sha256(repr(decisions).encode()).hexdigest(), len(decisions), kinds]


def summary(out: dict[str, list]) -> str:
    """Decisions in all cases, and how many of each kind."""
    kinds: dict[str, int] = {}
    for _, _, k in out.values():
        for name, n in k.items():
            kinds[name] = kinds.get(name, 0) + n
    return f"{sum(v[1] for v in out.values()):,} decisions (" + ", ".join(f"{n:,} {k}" for k, n in sorted(kinds.items())) + ")"


def compare(a_path: Path, b_path: Path) -> int:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    if a.keys() != b.keys():
        print(f"different cases: {len(a)} and {len(b)}")
        return 1
    differ = [k for k in a if a[k] != b[k]]
    print(f"{len(a)} cases, {summary(a)}; {len(differ)} differ")
    for k in differ[:20]:
        print(f"  {k}: {a[k][1]} and {b[k][1]} decisions")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0:120", help="A:B, the random snapshots' seeds (default 0:120)")
    ap.add_argument("--big", action="store_true", help="also the 1,000-node, 10,000-job snapshot")
    ap.add_argument("--json", type=Path, help="write the digests here")
    ap.add_argument("--compare", nargs=2, type=Path, metavar="JSON", help="compare two digest files instead")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    try:
        lo, hi = (int(x) for x in args.seeds.split(":"))
    except ValueError:
        ap.error(f"--seeds must be A:B with integers, got {args.seeds!r}")
    out: dict[str, list] = {}
    for seed in range(lo, hi):
        digest_cases(f"random{seed}", *random_snapshot(seed), CASES, out)
        if seed % 10 == 0:
            rng = random.Random(seed)
            nodes, running, pending = build_scale(rng.choice([10, 50, 100, 300]), rng.choice([0.8, 0.9, 1.0]), 2000,
                                                  0.2 + (seed % 3) / 10, seed=seed)
            digest_cases(f"scale{seed}", nodes, running, pending, 1_000_000.0, CASES, out)
    if args.big:
        nodes, running, pending = build_scale(1000, 0.9, 10000, 0.2)
        digest_cases("big", nodes, running, pending, 1_000_000.0, BIG_CASES, out)
    print(f"{len(out)} cases, {summary(out)}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=0, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

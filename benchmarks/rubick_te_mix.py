"""TE jobs meeting reconfigurable BE jobs: ``fitgpp`` against ``fitgpp-shrink``.

Usage::

    .venv/bin/python benchmarks/rubick_te_mix.py [--traces DIR] [--seed N] [--te-jobs N] [--json FILE]

The mixed workload (``scheduler.sim.morphling.mixed_workload``): the
single-node data-parallel jobs of ``workload-base`` as best-effort jobs,
plus seeded synthetic TE jobs, on the 8x8 testbed. Both policies start BE
jobs on their requested GPUs and plan; ``fitgpp-shrink`` may shrink a
reconfigurable BE job instead of preempting one when that loses less work.
Prints TE latency (wait and slowdown), BE completion, the time BE jobs
lost after they first started (completion - first start - duration, summed)
and the GPU-hours held without progress (checkpoints, restores, restarts).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.core.metrics import percentile  # noqa: E402
from scheduler.core.model import JobClass  # noqa: E402
from scheduler.sim.cluster import make_nodes  # noqa: E402
from scheduler.sim.records import SimConfig  # noqa: E402
from scheduler.sim.morphling import TESTBED, load_morphling, mixed_workload  # noqa: E402
from scheduler.sim.runner import parse_policy_spec, run_policy  # noqa: E402

POLICIES = ("fitgpp", "fitgpp-shrink")


def summarize(run) -> dict:
    te = sorted(o.wait for o in run.sim.outcomes if o.job_class is JobClass.TE)
    be = [o for o in run.sim.outcomes if o.job_class is JobClass.BE]
    be_ids = {o.job_id for o in be}
    be_preempt = [p for p in run.sim.preemptions if p.job_id in be_ids]
    return {
        "policy": run.policy,
        "te_jobs": len(te),
        "te_wait_p50_s": percentile(te, 50),
        "te_wait_p95_s": percentile(te, 95),
        "te_wait_p99_s": percentile(te, 99),
        "te_slowdown_p95": run.classes["TE"].slowdown["p95"],
        "be_jobs": len(be),
        "be_jct_mean_s": run.classes["BE"].jct_seconds["mean"],
        "be_jct_p99_s": run.classes["BE"].jct_seconds["p99"],
        "be_preemptions": len(be_preempt),
        # Time BE jobs lost after they first started: completion - first start
        # beyond their duration (checkpoints, restores, restarts, waiting
        # requeued after a preemption, running slower than requested).
        "be_lost_h": sum(max(0.0, o.completion - o.first_start - o.duration) for o in be) / 3600.0,
        "reconfigurations": run.sim.reconfigurations,
        "lost_gpu_hours": run.sim.lost_gpu_seconds / 3600.0,
        "makespan_h": run.makespan_seconds / 3600.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(REPO.parent / "shared" / "traces"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--te-jobs", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=TESTBED[0],
                        help="8-GPU nodes (fewer than the testbed's 8 make the same jobs contend)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    base = load_morphling(Path(args.traces) / "morphling" / "workloads" / "workload-base.csv")
    workload = mixed_workload(base, seed=args.seed, te_jobs=args.te_jobs)
    nodes = make_nodes(args.nodes, TESTBED[1], TESTBED[2], TESTBED[3])
    rows = [summarize(run_policy(parse_policy_spec(p), workload, nodes, SimConfig())) for p in POLICIES]
    print(f"{workload.name} on {args.nodes}x{TESTBED[1]}")
    for note in workload.notes[:1]:
        print(" ", note)
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{r[k]:.1f}" if isinstance(r[k], float) else str(r[k]) for k in keys))
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": workload.name, "seed": args.seed, "runs": rows},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

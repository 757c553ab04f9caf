"""Policies and their parameters side by side on the default synthetic
workload over several seeds (the fitgpp weight sweep, the cost of the
anti-starvation rule).

Each policy spec (``NAME`` or ``NAME:K=V,...`` as on the simulator's command
line) runs on the same workloads (one per seed, default 16 x 8 GPUs, resume
overhead 60 s); the table shows the mean over seeds of: TE p95 slowdown; BE
p50, p95 and p99 slowdown; the longest BE wait and the mean and longest wait
of the largest BE jobs (hours); GPU utilization; lost GPU-hours; preemptions.

Usage::

    python benchmarks/policy_sweep.py --seeds 0,1,2,3,4 [--json FILE] SPEC [SPEC ...]
    python benchmarks/policy_sweep.py --grid --seeds 0,1,2,3,4 --json FILE

``--grid`` runs preempt-newest, preempt-random and a grid of fitgpp weights
(loss 0/0.01/0.05 x excess 0/5/30 x victim 0/60 x repeat 0/120).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core.metrics import gpu_utilization, makespan, metrics_by_class  # noqa: E402
from scheduler.core.model import JobClass  # noqa: E402
from scheduler.sim.cluster import make_nodes  # noqa: E402
from scheduler.sim.engine import simulate  # noqa: E402
from scheduler.sim.records import SimConfig  # noqa: E402
from scheduler.sim.runner import build_policy, parse_policy_spec  # noqa: E402
from scheduler.sim.workloads.synthetic import SyntheticConfig, generate  # noqa: E402

RESUME_OVERHEAD = 60.0
FIELDS = (
    "te_p95", "be_p50", "be_p95", "be_p99", "be_max_wait_h", "big_mean_wait_h", "big_max_wait_h", "util",
    "lost_gpu_h", "preemptions",
)


def grid() -> list[str]:
    specs = ["preempt-newest", "preempt-random"]
    for lw, ew, vw, rw in itertools.product((0, 0.01, 0.05), (0, 5, 30), (0, 60), (0, 120)):
        specs.append(f"fitgpp:loss_weight={lw},excess_weight={ew},victim_weight={vw},repeat_weight={rw}")
    return specs


def run(spec_text: str, seeds: list[int], workloads: dict, nodes_shape: tuple[int, int]) -> dict:
    per_seed = []
    for seed in seeds:
        policy = build_policy(parse_policy_spec(spec_text), resume_overhead=RESUME_OVERHEAD)
        res = simulate(policy, make_nodes(*nodes_shape), workloads[seed].jobs, SimConfig(resume_overhead=RESUME_OVERHEAD))
        m = metrics_by_class(res.outcomes)
        be = [o for o in res.outcomes if o.job_class is JobClass.BE]
        biggest = max(o.num_gpus for o in be)
        big_waits = [o.wait / 3600.0 for o in be if o.num_gpus == biggest]
        per_seed.append({
            "seed": seed,
            "te_p95": m["TE"].slowdown["p95"],
            "be_p50": m["BE"].slowdown["p50"],
            "be_p95": m["BE"].slowdown["p95"],
            "be_p99": m["BE"].slowdown["p99"],
            "be_max_wait_h": max(o.wait for o in be) / 3600.0,
            "big_gpus": biggest,
            "big_mean_wait_h": statistics.fmean(big_waits),
            "big_max_wait_h": max(big_waits),
            "util": gpu_utilization(res.allocated_gpu_seconds, res.total_gpus, makespan(res.outcomes)),
            "lost_gpu_h": res.lost_gpu_seconds / 3600.0,
            "preemptions": len(res.preemptions),
        })
    means = {f: statistics.fmean(r[f] for r in per_seed) for f in FIELDS}
    return {"policy": spec_text, "mean": means, "per_seed": per_seed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*", help="policy specs, e.g. fitgpp:loss_weight=0.05")
    ap.add_argument("--grid", action="store_true", help="run the documented weight grid")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--cluster", default="16x8")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
        n, g = (int(x) for x in args.cluster.lower().split("x"))
    except ValueError:
        ap.error("--seeds must be integers separated by commas and --cluster like 16x8")
    specs = (grid() if args.grid else []) + list(args.specs)
    if not specs:
        ap.error("give policy specs or --grid")
    workloads = {s: generate(SyntheticConfig(seed=s, nodes=n, gpus_per_node=g)) for s in seeds}
    rows = []
    print(f"{'policy':70s} " + " ".join(f"{f:>15s}" for f in FIELDS))
    for spec in specs:
        row = run(spec, seeds, workloads, (n, g))
        rows.append(row)
        print(f"{spec:70s} " + " ".join(f"{row['mean'][f]:15.3f}" for f in FIELDS), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "policy_sweep", "seeds": seeds, "cluster": args.cluster,
                                         "resume_overhead": RESUME_OVERHEAD, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What bounds the makespan of a Rubick (Morphling) workload, from per-job data.

Usage::

    .venv/bin/python benchmarks/makespan_bound.py [--workload FILE] [--policy NAME ...] [--json FILE]

Two things, both on the simulator's own numbers:

* **A lower bound on any policy's makespan**: every job, submitted when the
  trace says, running alone at its fastest allowed plan and GPU count (1 to 64,
  packed on 8-GPU nodes; the iteration times policies see, measured where
  measured and modelled elsewhere) ends at ``submit + steps x fastest time``;
  no policy finishes before the latest of those. The jobs that set it are
  listed. (It ignores contention, so it is a bound, not a schedule.)
* **Each policy's makespan and the job that ends last**, with its submission,
  first start and attempts (GPUs, start, end), from a simulation of the
  workload under each ``--policy`` (default: ``fifo-fixed`` and ``rubick``).

The best ratio a policy could reach against a baseline is the baseline's
makespan over the bound.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.sim.cluster import make_nodes  # noqa: E402
from scheduler.sim.engine import simulate  # noqa: E402
from scheduler.sim.morphling import NODE_GPUS, TESTBED, load_morphling  # noqa: E402
from scheduler.sim.records import SimConfig  # noqa: E402
from scheduler.sim.runner import build_policy, parse_policy_spec  # noqa: E402

MAX_GPUS = 64


def packed(gpus: int) -> list[int]:
    return [NODE_GPUS] * (gpus // NODE_GPUS) + ([gpus % NODE_GPUS] if gpus % NODE_GPUS else [])


def fastest_ends(jobs) -> list[dict]:  # noqa: ANN001 - the loader's SimJob list
    """Per job, its end if it ran alone from its submission at its fastest allowed configuration."""
    out = []
    for job in jobs:
        spec = job.spec
        options = [(found[1], g, found[0]) for g in range(1, MAX_GPUS + 1)
                   if (found := spec.throughput.best(packed(g))) is not None]
        seconds, gpus, plan = min(options)
        run = spec.steps * seconds
        out.append({"job": spec.id, "submitted_h": spec.submit_time / 3600, "plan": plan, "gpus": gpus,
                    "alone_h": run / 3600, "ends_h": (spec.submit_time + run) / 3600})
    return sorted(out, key=lambda r: -r["ends_h"])


def last_job(policy_name: str, workload) -> dict:  # noqa: ANN001
    """The policy's makespan and the attempts of the job that ends last."""
    config = SimConfig(record_attempts=True)  # the CLI's overheads (60 s resume and relaunch)
    policy = build_policy(parse_policy_spec(policy_name), config.resume_overhead, config.reconfigure_overhead)
    result = simulate(policy, make_nodes(*TESTBED), workload.jobs, config)
    attempts = defaultdict(list)
    for a in result.attempts:
        attempts[a.job_id].append(a)
    ends = {job: max(a.end for a in rows) for job, rows in attempts.items()}
    job = max(ends, key=ends.get)
    rows = sorted(attempts[job], key=lambda a: a.start)
    submitted = next(j.spec.submit_time for j in workload.jobs if j.spec.id == job)
    return {"policy": policy_name, "makespan_h": ends[job] / 3600, "last_job": job, "submitted_h": submitted / 3600,
            "attempts": [{"gpus": a.placement.num_gpus, "start_h": a.start / 3600, "end_h": a.end / 3600}
                         for a in rows]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", type=Path,
                    default=REPO.parent / "shared" / "traces" / "morphling" / "workloads" / "workload-base.csv")
    ap.add_argument("--policy", action="append", help="policies to simulate (default: fifo-fixed, rubick)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    workload = load_morphling(args.workload)
    bound = fastest_ends(workload.jobs)
    runs = [last_job(name, workload) for name in (args.policy or ["fifo-fixed", "rubick"])]
    print(f"lower bound on the makespan: {bound[0]['ends_h']:.2f} h, set by:")
    for r in bound[:5]:
        print(f"  {r['job']}: submitted {r['submitted_h']:.2f} h, alone at its fastest ({r['plan']} on "
              f"{r['gpus']} GPUs) {r['alone_h']:.2f} h -> {r['ends_h']:.2f} h")
    for run in runs:
        spans = ", ".join(f"{a['gpus']} GPUs {a['start_h']:.2f}-{a['end_h']:.2f} h" for a in run["attempts"])
        print(f"{run['policy']}: makespan {run['makespan_h']:.2f} h ({run['makespan_h'] / bound[0]['ends_h']:.2f}x "
              f"the bound); ends last: {run['last_job']} submitted {run['submitted_h']:.2f} h: {spans}")
    if args.json:
        args.json.write_text(json.dumps({"workload": str(args.workload), "bound_h": bound[0]["ends_h"],
                                         "bound_jobs": bound[:5], "policies": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Simulator speed: one policy over the Philly trace, jobs simulated per second
and peak memory at a few trace sizes (to show memory grows linearly).

Usage::

    .venv/bin/python benchmarks/sim_speed.py [--policy fitgpp] [--cluster 64x8]
        [--sizes 0.25,0.5,1] [--json FILE] [--profile FILE]

Each size is the first fraction of the trace's jobs in arrival order, run in a
fresh child process (one core) so that every peak is its own:

* ``jobs_per_second``: jobs / seconds spent in the simulation (trace loading
  excluded and reported separately);
* ``peak_rss_mb``: the child's peak resident set size (``resource``);
* ``peak_traced_mb``: peak Python heap during the simulation alone, measured by
  ``tracemalloc`` in a second child (tracing slows a run, so it is not timed).

``--profile FILE`` writes a cProfile of the whole-trace run (pstats text,
sorted by cumulative time).

``--call-kinds`` adds ``call_kinds`` (a further whole-trace run, timed per ``decide()`` call):
for the calls that preempt, those that start jobs without preempting and those that do neither,
the number of calls, their seconds, microseconds per call and share of all decide time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def default_trace() -> Path:
    base = os.environ.get("GPUSCHED_TRACES_DIR") or str(REPO.parent / "shared" / "traces")
    return Path(base) / "philly" / "philly.csv"


def child(args: argparse.Namespace) -> dict:
    """Run one measurement in this process and return it (called in a child)."""
    import resource
    import time

    from scheduler.sim.cluster import make_nodes, parse_cluster
    from scheduler.sim.engine import simulate
    from scheduler.sim.records import SimConfig
    from scheduler.sim.runner import build_policy, parse_policy_spec
    from scheduler.sim.workloads.philly import load_philly

    t0 = time.perf_counter()
    workload = load_philly(args.trace)
    jobs = workload.jobs[: max(1, round(len(workload.jobs) * args.fraction))]
    load_s = time.perf_counter() - t0
    nodes = make_nodes(*parse_cluster(args.cluster))
    policy = build_policy(parse_policy_spec(args.policy))
    out: dict = {"fraction": args.fraction, "jobs": len(jobs), "load_seconds": round(load_s, 3)}
    if args.mode == "traced":
        import tracemalloc

        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        simulate(policy, nodes, jobs, SimConfig())
        _, peak = tracemalloc.get_traced_memory()
        out["peak_traced_mb"] = round((peak - base) / 2**20, 2)
        return out
    if args.mode == "kinds":
        out["call_kinds"] = _timed_by_kind(policy, nodes, jobs)
        return out
    if args.mode == "profile":
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        simulate(policy, nodes, jobs, SimConfig())
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
        Path(args.profile).write_text(text.getvalue())
        return out
    t1 = time.perf_counter()
    result = simulate(policy, nodes, jobs, SimConfig())
    sim_s = time.perf_counter() - t1
    out.update(
        sim_seconds=round(sim_s, 3),
        jobs_per_second=round(len(jobs) / sim_s, 1),
        decide_calls=result.decide_calls,
        preemptions=len(result.preemptions),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    )
    return out


def _timed_by_kind(policy, nodes, jobs) -> dict:  # noqa: ANN001
    """Run the simulation with every ``decide()`` call timed and sorted by what it decided."""
    import time

    from scheduler.core.decisions import Preempt, Start
    from scheduler.sim.engine import simulate
    from scheduler.sim.records import SimConfig

    decide = policy.decide
    totals = {"preempting": [0, 0.0], "starting": [0, 0.0], "neither": [0, 0.0]}

    def timed(snapshot, now):  # noqa: ANN001, ANN202
        began = time.perf_counter()
        out = decide(snapshot, now)
        spent = time.perf_counter() - began
        kinds = {type(d) for d in out}
        kind = "preempting" if Preempt in kinds else "starting" if Start in kinds else "neither"
        totals[kind][0] += 1
        totals[kind][1] += spent
        return out

    policy.decide = timed
    simulate(policy, nodes, jobs, SimConfig())
    whole = sum(seconds for _, seconds in totals.values()) or 1.0
    return {kind: {"calls": n, "seconds": round(seconds, 3), "us_per_call": round(1e6 * seconds / max(n, 1), 1),
                   "share": round(seconds / whole, 3)} for kind, (n, seconds) in totals.items()}


def spawn(args: argparse.Namespace, fraction: float, mode: str) -> dict:
    cmd = [sys.executable, __file__, "--child", "--mode", mode, "--fraction", str(fraction),
           "--policy", args.policy, "--cluster", args.cluster, "--trace", str(args.trace)]
    if args.profile:
        cmd += ["--profile", args.profile]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"benchmark child failed ({mode}, fraction {fraction})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="fitgpp")
    p.add_argument("--cluster", default="64x8", help="NODESxGPUS (default 64x8 = 512 GPUs)")
    p.add_argument("--trace", type=Path, default=default_trace())
    p.add_argument("--sizes", default="0.25,0.5,1", help="fractions of the trace, comma-separated")
    p.add_argument("--json", help="write the results as JSON")
    p.add_argument("--profile", help="write a cProfile report of the whole-trace run to this file")
    p.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    p.add_argument("--call-kinds", action="store_true", help="time decide() per kind of call (whole trace)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="timed", help=argparse.SUPPRESS)
    p.add_argument("--fraction", type=float, default=1.0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    if not args.trace.exists():
        raise SystemExit(f"trace not found: {args.trace} (set GPUSCHED_TRACES_DIR)")
    sizes = [float(s) for s in args.sizes.split(",")]
    runs = []
    for f in sizes:
        run = spawn(args, f, "timed")
        if not args.no_memory:
            run["peak_traced_mb"] = spawn(args, f, "traced")["peak_traced_mb"]
        runs.append(run)
        print(
            f"{run['jobs']:>6} jobs: {run['jobs_per_second']:>9,.0f} jobs/s  sim {run['sim_seconds']:.2f} s  "
            f"load {run['load_seconds']:.2f} s  peak RSS {run['peak_rss_mb']:.0f} MB"
            + (f"  peak traced {run['peak_traced_mb']:.1f} MB" if "peak_traced_mb" in run else ""),
            file=sys.stderr,
        )
    if args.profile:
        spawn(args, 1.0, "profile")
    kinds = spawn(args, 1.0, "kinds")["call_kinds"] if args.call_kinds else None
    report = {
        "benchmark": "sim_speed",
        "policy": args.policy,
        "cluster": args.cluster,
        "trace": args.trace.name,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "runs": runs,
    }
    if kinds is not None:
        report["call_kinds"] = kinds
    if "peak_traced_mb" in runs[0] and runs[0]["jobs"]:
        report["traced_kb_per_job"] = [round(1024 * r["peak_traced_mb"] / r["jobs"], 2) for r in runs]
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

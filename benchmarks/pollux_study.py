"""The Pollux study (OSDI 2021, Section 5.3) through our simulator: average JCT
per workload beside the published figure.

Usage::

    .venv/bin/python benchmarks/pollux_study.py [--traces DIR] [--json FILE]

Runs the eight 160-job workloads of ``<traces>/pollux/workloads`` on the
study's cluster (16 nodes x 4 GPUs, 30 s restart) under the policies we have
for it, and prints per workload and on average our mean JCT, the published
one (``published/<policy>-1.0.json``) and the difference in percent.

Policies: ``tiresias`` with the study's parameters (TunedJobs, jobs as
``scheduler/sim/workloads/pollux.py`` builds them; two queues split at 16
GPU-hours of attained service, each queue in arrival order whether its
jobs run or not, as the study's Tiresias; no starvation rule). The study's Optimus+Oracle+TunedJobs and Pollux need adaptive jobs in
the simulator, which it does not have yet: they are listed as not run, never
estimated.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.sim.cluster import make_nodes  # noqa: E402
from scheduler.sim.records import SimConfig  # noqa: E402
from scheduler.sim.runner import parse_policy_spec, run_policy  # noqa: E402
from scheduler.sim.workloads.pollux import NODE_GPUS, NODES, RESTART_SECONDS, load_pollux_tuned  # noqa: E402
from scheduler.sim.workloads.pollux_app import applications  # noqa: E402
from scheduler.sim.workloads.pollux_data import load_apps  # noqa: E402

POLICIES = {"tiresias": "tiresias:thresholds=57600,within_queue=arrival"}
NOT_RUN = {"optimus": "needs adaptive jobs in the simulator (not built)",
           "pollux": "needs adaptive jobs in the simulator (not built)"}
WORKLOADS = [f"workload-{i}" for i in range(1, 9)]


def run(root: Path) -> dict:
    apps = applications(load_apps(root / "apps"))
    nodes = make_nodes(NODES, NODE_GPUS)
    config = SimConfig(resume_overhead=RESTART_SECONDS)
    out: dict = {"cluster": f"{NODES}x{NODE_GPUS}", "restart_seconds": RESTART_SECONDS, "policies": {},
                 "not_run": NOT_RUN}
    for name, spec in POLICIES.items():
        published = json.loads((root / "published" / f"{name}-1.0.json").read_text())
        rows = {}
        started = time.perf_counter()
        for w in WORKLOADS:
            result = run_policy(parse_policy_spec(spec), load_pollux_tuned(root / "workloads" / f"{w}.csv", apps),
                                nodes, config)
            ours = result.classes["all"].jct_seconds["mean"]
            theirs = published["avg_jct_seconds"][w]
            rows[w] = {"ours_s": ours, "published_s": theirs, "diff_pct": 100.0 * (ours - theirs) / theirs,
                       "preemptions": result.preemptions}
        mean_ours = sum(r["ours_s"] for r in rows.values()) / len(rows)
        out["policies"][name] = {
            "spec": spec, "workloads": rows, "mean_ours_s": mean_ours, "mean_published_s": published["mean_of_avgs"],
            "mean_diff_pct": 100.0 * (mean_ours - published["mean_of_avgs"]) / published["mean_of_avgs"],
            "wall_seconds": time.perf_counter() - started,
        }
    return out


def render(report: dict) -> str:
    lines = [f"Pollux study, relative job load 1.0, {report['cluster']} GPUs, "
             f"{report['restart_seconds']:g} s restart; avg JCT in s, ours vs published"]
    for name, p in report["policies"].items():
        lines.append(f"\n{name} ({p['spec']}), wall {p['wall_seconds']:.1f} s")
        lines.append(f"{'workload':12} {'ours':>8} {'published':>10} {'diff %':>8}")
        for w, r in p["workloads"].items():
            lines.append(f"{w:12} {r['ours_s']:8.0f} {r['published_s']:10.0f} {r['diff_pct']:+8.1f}")
        lines.append(f"{'mean':12} {p['mean_ours_s']:8.0f} {p['mean_published_s']:10.0f} {p['mean_diff_pct']:+8.1f}")
    for name, why in report["not_run"].items():
        lines.append(f"{name}: not run ({why})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", help="shared traces folder (holding pollux/)")
    ap.add_argument("--json", type=Path, help="write the report here")
    args = ap.parse_args(argv)
    base = Path(args.traces or os.environ.get("GPUSCHED_TRACES_DIR") or REPO.parent / "shared" / "traces")
    report = run(base / "pollux")
    sys.stdout.write(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

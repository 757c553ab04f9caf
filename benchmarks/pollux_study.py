"""The Pollux study (OSDI 2021, Section 5.3) through our simulator: average JCT
per workload and policy beside the published figure.

Usage::

    .venv/bin/python benchmarks/pollux_study.py [--traces DIR] [--json FILE] [--html FILE]
        [--workers N] [--policy NAME ...] [--workload workload-K ...]

Runs the eight 160-job workloads of ``<traces>/pollux/workloads`` on the
study's cluster (16 nodes x 4 GPUs, 30 s restart) under its three policies
and prints, per workload and on average, our mean JCT, the published one
(``published/<policy>-1.0.json``) and the difference in percent, then per
application the mean JCT ours against published (where differences come
from). ``--workers`` runs that many simulations at once (default 2).

* ``tiresias``: Tiresias+TunedJobs, plain jobs (``load_pollux_tuned``) with
  the study's parameters (two queues split at 16 GPU-hours of attained
  service, each queue in arrival order whether its jobs run or not, no
  starvation rule, GPUs taken from the nodes with the most free first, a
  spread job at its placement's measured speed), in 60 s rounds (``--tiresias-every-event``: at every
  arrival and completion instead, as before the engine had rounds).
* ``optimus``: Optimus+Oracle+TunedJobs, adaptive jobs keeping the trace's
  batch (``load_pollux_adaptive(batch="trace")``), 60 s rounds.
* ``pollux``: adaptive jobs at their goodput-optimal batch
  (``batch="adaptive"``), the genetic algorithm seeded with ``--seed``
  (default 0), 60 s rounds.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
import time
from collections import defaultdict
from multiprocessing import Pool
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.core.policy import make_policy  # noqa: E402
from scheduler.sim.cluster import make_nodes  # noqa: E402
from scheduler.sim.engine import simulate  # noqa: E402
from scheduler.sim.records import SimConfig  # noqa: E402
from scheduler.sim.runner import build_policy, parse_policy_spec  # noqa: E402
from scheduler.sim.workloads.pollux import (  # noqa: E402
    NODE_GPUS,
    NODES,
    RESTART_SECONDS,
    load_pollux_adaptive,
    load_pollux_tuned,
)
from scheduler.sim.workloads.pollux_app import applications  # noqa: E402
from scheduler.sim.workloads.pollux_data import load_apps  # noqa: E402

ROUND_SECONDS = 60.0
POLICIES = {
    "tiresias": ("tuned", "tiresias:thresholds=57600,within_queue=arrival,placement=most-free"),
    "optimus": ("trace", "optimus"),
    "pollux": ("adaptive", "pollux"),
}
WORKLOADS = [f"workload-{i}" for i in range(1, 9)]

_APPS: dict = {}
_MODELS: dict = {}


def run_one(task: tuple[str, str, str, int, bool]) -> dict:
    """Simulate one (root, policy, workload, seed, Tiresias at every event);
    JCT per job and wall time."""
    root, name, workload, seed, every_event = task
    if root not in _APPS:
        _APPS[root] = applications(load_apps(Path(root) / "apps"))
    apps = _APPS[root]
    jobs_kind, spec = POLICIES[name]
    path = Path(root) / "workloads" / f"{workload}.csv"
    nodes = make_nodes(NODES, NODE_GPUS)
    started = time.perf_counter()
    if jobs_kind == "tuned":
        jobs = load_pollux_tuned(path, apps).jobs
        config = SimConfig(resume_overhead=RESTART_SECONDS, round_seconds=None if every_event else ROUND_SECONDS)
        policy = build_policy(parse_policy_spec(spec), config.resume_overhead, config.reconfigure_overhead)
    else:
        jobs = load_pollux_adaptive(path, apps, jobs_kind, _MODELS).jobs
        config = SimConfig(round_seconds=ROUND_SECONDS)
        policy = make_policy(spec, seed=seed) if name == "pollux" else make_policy(spec)
    result = simulate(policy, nodes, jobs, config)
    jcts = {o.job_id: o.completion - o.submit_time for o in result.outcomes}
    return {"policy": name, "workload": workload, "jct_seconds": jcts,
            "wall_seconds": time.perf_counter() - started,
            "restarts": result.reconfigurations + len(result.preemptions)}


def diff_pct(ours: float, theirs: float) -> float:
    return 100.0 * (ours - theirs) / theirs


def summarise(root: Path, runs: list[dict], policies: list[str], workloads: list[str]) -> dict:
    """Per policy: per workload ours/published/diff, the mean, and per application."""
    out: dict = {}
    for name in policies:
        published = json.loads((root / "published" / f"{name}-1.0.json").read_text())
        rows: dict = {}
        by_app: dict = defaultdict(lambda: [0.0, 0.0, 0])
        for r in (r for r in runs if r["policy"] == name):
            w = r["workload"]
            ours = sum(r["jct_seconds"].values()) / len(r["jct_seconds"])
            theirs = published["avg_jct_seconds"][w]
            rows[w] = {"ours_s": ours, "published_s": theirs, "diff_pct": diff_pct(ours, theirs),
                       "restarts": r["restarts"], "wall_seconds": r["wall_seconds"],
                       "jct_seconds": r["jct_seconds"]}
            for job, jct in r["jct_seconds"].items():
                app = job.rsplit("-", 1)[0]
                by_app[app][0] += jct
                by_app[app][1] += published["jct_seconds"][w][job]
                by_app[app][2] += 1
        rows = {w: rows[w] for w in workloads if w in rows}
        mean_ours = sum(r["ours_s"] for r in rows.values()) / len(rows)
        mean_theirs = sum(r["published_s"] for r in rows.values()) / len(rows)
        out[name] = {
            "spec": POLICIES[name][1], "workloads": rows, "mean_ours_s": mean_ours,
            "mean_published_s": mean_theirs, "mean_diff_pct": diff_pct(mean_ours, mean_theirs),
            "by_application": {a: {"jobs": n, "ours_s": o / n, "published_s": t / n, "diff_pct": diff_pct(o, t)}
                               for a, (o, t, n) in sorted(by_app.items())},
        }
    return out


def render(report: dict) -> str:
    lines = [f"Pollux study, relative job load 1.0, {report['cluster']} GPUs, {report['restart_seconds']:g} s "
             f"restart; avg JCT in s, ours vs published; wall {report['wall_seconds']:.0f} s with "
             f"{report['workers']} workers (load average before {report['load_before']})"]
    for name, p in report["policies"].items():
        wall = sum(r["wall_seconds"] for r in p["workloads"].values())
        lines.append(f"\n{name} ({p['spec']}), simulation time {wall:.0f} s")
        lines.append(f"{'workload':12} {'ours':>8} {'published':>10} {'diff %':>8} {'restarts':>9}")
        for w, r in p["workloads"].items():
            lines.append(f"{w:12} {r['ours_s']:8.0f} {r['published_s']:10.0f} {r['diff_pct']:+8.1f} "
                         f"{r['restarts']:9d}")
        lines.append(f"{'mean':12} {p['mean_ours_s']:8.0f} {p['mean_published_s']:10.0f} {p['mean_diff_pct']:+8.1f}")
        apps = ", ".join(f"{a} {v['ours_s']:.0f}/{v['published_s']:.0f} ({v['diff_pct']:+.0f} %)"
                         for a, v in p["by_application"].items())
        lines.append(f"by application, mean JCT ours/published: {apps}")
    means = {n: p["mean_ours_s"] for n, p in report["policies"].items()}
    if "pollux" in means:
        for other in ("tiresias", "optimus"):
            if other in means:
                lines.append(f"pollux vs {other}: ours {diff_pct(means['pollux'], means[other]):+.1f} %, "
                             f"published {report['published_gaps'][other]:+.1f} %")
    return "\n".join(lines) + "\n"


def render_html(report: dict) -> str:
    """A self-contained page with the tables of ``render``."""
    parts = ["<!doctype html><meta charset='utf-8'><title>Pollux study</title>",
             "<style>body{font-family:sans-serif;margin:1.5em} td,th{padding:.2em .6em;text-align:right}"
             " th:first-child,td:first-child{text-align:left} .miss{color:#b00}</style>",
             f"<h1>Pollux study: our simulator against the published JCTs</h1><p>{html.escape(render(report).splitlines()[0])}</p>"]
    for name, p in report["policies"].items():
        limit = 10.0 if name == "pollux" else 5.0
        parts.append(f"<h2>{html.escape(name)}</h2><table><tr><th>workload</th><th>ours s</th><th>published s</th>"
                     "<th>difference %</th><th>restarts</th></tr>")
        for w, r in p["workloads"].items():
            cls = " class='miss'" if abs(r["diff_pct"]) > limit else ""
            parts.append(f"<tr><td>{w}</td><td>{r['ours_s']:.0f}</td><td>{r['published_s']:.0f}</td>"
                         f"<td{cls}>{r['diff_pct']:+.1f}</td><td>{r['restarts']}</td></tr>")
        parts.append(f"<tr><th>mean</th><th>{p['mean_ours_s']:.0f}</th><th>{p['mean_published_s']:.0f}</th>"
                     f"<th>{p['mean_diff_pct']:+.1f}</th><th></th></tr></table>")
        parts.append("<table><tr><th>application</th><th>jobs</th><th>ours s</th><th>published s</th>"
                     "<th>difference %</th></tr>")
        for a, v in p["by_application"].items():
            parts.append(f"<tr><td>{html.escape(a)}</td><td>{v['jobs']}</td><td>{v['ours_s']:.0f}</td>"
                         f"<td>{v['published_s']:.0f}</td><td>{v['diff_pct']:+.1f}</td></tr>")
        parts.append("</table>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", help="shared traces folder (holding pollux/)")
    ap.add_argument("--json", type=Path, help="write the report here (per-job JCTs included)")
    ap.add_argument("--html", type=Path, help="write an HTML report here")
    ap.add_argument("--workers", type=int, default=2, help="simulations at once (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="Pollux's genetic algorithm seed (default 0)")
    ap.add_argument("--tiresias-every-event", action="store_true",
                    help="Tiresias decides at every arrival and completion, not in 60 s rounds")
    ap.add_argument("--policy", action="append", choices=list(POLICIES), help="only these policies")
    ap.add_argument("--workload", action="append", choices=WORKLOADS, help="only these workloads")
    args = ap.parse_args(argv)
    base = Path(args.traces or os.environ.get("GPUSCHED_TRACES_DIR") or REPO.parent / "shared" / "traces")
    root = (base / "pollux").resolve()
    policies, workloads = args.policy or list(POLICIES), args.workload or WORKLOADS
    # Longest simulations first, so the workers finish together.
    tasks = [(str(root), p, w, args.seed, args.tiresias_every_event) for p in sorted(policies, key=lambda p: p != "pollux") for w in workloads]
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    started = time.perf_counter()
    if args.workers > 1:
        with Pool(args.workers) as pool:
            runs = pool.map(run_one, tasks, chunksize=1)
    else:
        runs = [run_one(t) for t in tasks]
    published = {n: json.loads((root / "published" / f"{n}-1.0.json").read_text())["mean_of_avgs"]
                 for n in POLICIES}
    report = {"cluster": f"{NODES}x{NODE_GPUS}", "restart_seconds": RESTART_SECONDS, "round_seconds": ROUND_SECONDS,
              "seed": args.seed, "tiresias_every_event": args.tiresias_every_event, "workers": args.workers, "wall_seconds": time.perf_counter() - started,
              "load_before": round(load_before, 2),
              "published_gaps": {n: diff_pct(published["pollux"], published[n]) for n in ("tiresias", "optimus")},
              "policies": summarise(root, runs, policies, workloads)}
    sys.stdout.write(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.html:
        args.html.write_text(render_html(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m scheduler.sim.sweep``: every policy over a range of one synthetic
workload parameter, as a Markdown table for docs/results.md.

    python -m scheduler.sim.sweep --vary load=0.6,0.7,0.8,0.9,1.0,1.1,1.2 [--json FILE]
    python -m scheduler.sim.sweep --vary te_share=0.1,0.2,0.3,0.4,0.5
    python -m scheduler.sim.sweep --vary seed=0,1,2,3,4

Every row states FIFO's TE p95 slowdown for its setting, and each policy's
change of the paper's three figures against FIFO. The paper's bar (fitgpp vs
fifo: TE p95 down >= 96.6 %, BE p50 up <= 18.0 %, BE p95 up <= 23.9 %) is checked
for every policy row and shown as ``bar``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace

from scheduler.sim.cli import DEFAULT_CLUSTER
from scheduler.sim.cluster import make_nodes, parse_cluster
from scheduler.sim.records import SimConfig
from scheduler.sim.runner import PolicySpec, RunResult, parse_policy_spec, parse_value, run_all
from scheduler.sim.workloads.synthetic import SyntheticConfig, generate

ALL_POLICIES = ("fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp")
PAPER_BAR = {"te_p95": -96.6, "be_p50": 18.0, "be_p95": 23.9}


def figures(run: RunResult) -> dict[str, float | None]:
    te, be = run.classes["TE"], run.classes["BE"]
    return {
        "te_p95": te.slowdown["p95"],
        "be_p50": be.slowdown["p50"],
        "be_p95": be.slowdown["p95"],
        "be_p99": be.slowdown["p99"],
        "be_mean": be.slowdown["mean"],
        "be_max_wait_hours": max((o.wait for o in run.sim.outcomes if o.job_class.value == "BE"), default=0.0) / 3600.0,
        "te_wait_p95": te.wait_seconds["p95"],
        "lost_gpu_hours": run.sim.lost_gpu_seconds / 3600.0,
        "preemptions": run.preemptions,
        "utilization": run.gpu_utilization,
        "jct_mean_hours": run.classes["all"].jct_seconds["mean"] / 3600.0,
    }


def change(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return 100.0 * (value - base) / base


def meets_bar(fig: dict, base: dict) -> bool:
    d_te, d_p50, d_p95 = (change(fig[k], base[k]) for k in ("te_p95", "be_p50", "be_p95"))
    if None in (d_te, d_p50, d_p95):
        return False
    return d_te <= PAPER_BAR["te_p95"] and d_p50 <= PAPER_BAR["be_p50"] and d_p95 <= PAPER_BAR["be_p95"]


def sweep(
    key: str,
    values: Sequence[object],
    specs: Sequence[PolicySpec],
    base: SyntheticConfig,
    config: SimConfig,
) -> list[dict]:
    """One record per (value, policy)."""
    nodes = make_nodes(base.nodes, base.gpus_per_node)
    records = []
    for value in values:
        workload = generate(replace(base, **{key: value}))
        runs = run_all(specs, workload, nodes, config)
        fifo = next((r for r in runs if r.policy == "fifo"), None)
        base_fig = figures(fifo) if fifo else None
        for run in runs:
            fig = figures(run)
            records.append(
                {
                    "vary": key,
                    "value": value,
                    "policy": run.policy,
                    "workload": run.workload_label,
                    "fifo_te_p95": base_fig["te_p95"] if base_fig else None,
                    **fig,
                    "te_p95_change": change(fig["te_p95"], base_fig["te_p95"]) if base_fig else None,
                    "be_p50_change": change(fig["be_p50"], base_fig["be_p50"]) if base_fig else None,
                    "be_p95_change": change(fig["be_p95"], base_fig["be_p95"]) if base_fig else None,
                    "meets_paper_bar": meets_bar(fig, base_fig) if base_fig and run is not fifo else None,
                }
            )
        print(f"{key}={value}: done", file=sys.stderr)
    return records


def _num(v: float | None, digits: int = 2) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}"


def markdown(records: list[dict]) -> str:
    header = (
        "| {k} | policy | FIFO TE p95 | TE p95 | BE p50 | BE p95 | TE p95 vs FIFO % | BE p50 vs FIFO % | "
        "BE p95 vs FIFO % | paper bar | BE p99 | max BE wait h | JCT mean h | lost GPU-h | preempt | util % |"
    )
    lines = [header.format(k=records[0]["vary"] if records else "value"), "|" + "---|" * 16]
    for r in records:
        bar = {True: "met", False: "missed", None: ""}[r["meets_paper_bar"]]
        lines.append(
            f"| {r['value']} | {r['policy']} | {_num(r['fifo_te_p95'], 1)} | {_num(r['te_p95'])} | "
            f"{_num(r['be_p50'])} | {_num(r['be_p95'])} | {_pct(r['te_p95_change'])} | {_pct(r['be_p50_change'])} | "
            f"{_pct(r['be_p95_change'])} | {bar} | {_num(r['be_p99'], 1)} | {_num(r['be_max_wait_hours'], 1)} | "
            f"{_num(r['jct_mean_hours'], 1)} | {_num(r['lost_gpu_hours'], 1)} | {r['preemptions']} | "
            f"{100 * r['utilization']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scheduler.sim.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--vary", required=True, metavar="PARAM=V1,V2,...",
                   help="a SyntheticConfig field (load, te_share, seed, jobs, ...) and its values")
    p.add_argument("--policy", action="append", metavar="NAME[:K=V,...]",
                   help=f"policies (default: {', '.join(ALL_POLICIES)})")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER)
    p.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE",
                   help="fix another SyntheticConfig field (repeatable)")
    p.add_argument("--resume-overhead", type=float, default=SimConfig().resume_overhead)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    key, _, raw = args.vary.partition("=")
    if not raw or key not in SyntheticConfig.__dataclass_fields__:
        p.error(f"--vary must be PARAM=V1,V2,... with PARAM a synthetic workload parameter, got {args.vary!r}")
    values = [parse_value(v) for v in raw.split(",")]
    nodes, gpus = parse_cluster(args.cluster)
    fixed = {}
    for item in args.set:
        k, _, v = item.partition("=")
        if k not in SyntheticConfig.__dataclass_fields__:
            p.error(f"--set names an unknown parameter {k!r}")
        fixed[k] = parse_value(v)
    base = SyntheticConfig(nodes=nodes, gpus_per_node=gpus, **fixed)
    specs = [parse_policy_spec(s) for s in (args.policy or ALL_POLICIES)]
    records = sweep(key, values, specs, base, SimConfig(resume_overhead=args.resume_overhead))
    print(markdown(records))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(records, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

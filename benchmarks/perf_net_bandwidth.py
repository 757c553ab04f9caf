"""Diagnostic: would a per-model inter-node bandwidth fix the multi-node data-parallel rows?

Usage::

    .venv/bin/python benchmarks/perf_net_bandwidth.py [--traces DIR] [--json FILE]

The model prices a multi-node ring at ``net``, the cluster's measured
inter-node bandwidth per node (``profiles/env_params.json``, 6.89 GB/s), the
same for every model: no profiling run spans nodes, so none can fit it. This
predicts every multi-node data-parallel row of each model again at each
bandwidth of a grid and reports the bandwidth with the lowest average error
over *all* those rows. It is an oracle (it chooses with the rows it is
scored on), so it bounds from below what fitting ``net`` per model from a
few sampled multi-node rows could reach.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.core.perf.__main__ import morphling_dir  # noqa: E402
from scheduler.core.perf.catalog import CATALOG  # noqa: E402
from scheduler.core.perf.data import load_placements  # noqa: E402
from scheduler.core.perf.throughput import ThroughputModel  # noqa: E402
from scheduler.core.perf.validate import predict_rows  # noqa: E402

GRID_GBPS = (2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 15.0, 20.0, 30.0, 50.0, 100.0)


def errors_pct(tm: ThroughputModel, model: str, rows: list, bandwidth: float) -> list[float]:
    """Relative errors in percent of ``rows`` predicted at ``bandwidth``."""
    return [100.0 * r.error for r in predict_rows(tm, model, rows, bandwidth=bandwidth)]


def per_model(tm: ThroughputModel, root: Path) -> list[dict]:
    out = []
    for name, spec in CATALOG.items():
        rows = [r for r in load_placements(root / "placements" / f"{spec.placements}.csv")
                if len(r.placement) > 1 and not r.plan.is_3d]
        if not rows:
            continue
        net = tm.fit(name).env.net_gbps
        by_grid = {b: errors_pct(tm, name, rows, b) for b in (*GRID_GBPS, net)}
        best = min(by_grid, key=lambda b: sum(by_grid[b]))
        out.append({"model": name, "rows": len(rows), "net_gbps": net,
                    "avg_pct": sum(by_grid[net]) / len(rows), "max_pct": max(by_grid[net]), "best_net_gbps": best,
                    "best_avg_pct": sum(by_grid[best]) / len(rows), "best_max_pct": max(by_grid[best])})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", help="traces folder (holding morphling/)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    root = morphling_dir(args.traces)
    rows = per_model(ThroughputModel.from_traces(root), root)
    for r in rows:
        print(f"{r['model']:8s} {r['rows']:3d} multi-node DP rows: at {r['net_gbps']:g} GB/s avg {r['avg_pct']:.1f} % "
              f"max {r['max_pct']:.1f} %; best of the grid {r['best_net_gbps']:g} GB/s: avg {r['best_avg_pct']:.1f} % "
              f"max {r['best_max_pct']:.1f} %")
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "perf_net_bandwidth", "models": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

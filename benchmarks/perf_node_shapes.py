"""Diagnostic: placements with the same GPUs and nodes, measured against predicted.

Usage::

    .venv/bin/python benchmarks/perf_node_shapes.py [--traces DIR] [--json FILE]

The performance model's data-parallel form sees a placement only through its
GPU count ``n`` and node count ``N`` (the ring's ``(g-1)/g`` inside a node
uses the mean ``g = n/N``), so ``26``, ``35`` and ``44`` (8 GPUs on 2 nodes)
get one prediction. This prints, per model and data-parallel plan, every set
of measured placements that share ``n`` and ``N`` (at least two of them):
the measured seconds of each, the one prediction, and the spread of the
measurements (largest over smallest). If a topology term (the busiest
node's intra-node ring, one network rail per GPU of the thinnest node) were
what the form lacks, the placements would order the same way for every
model; the output shows whether they do.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.core.perf.__main__ import morphling_dir  # noqa: E402
from scheduler.core.perf.catalog import CATALOG  # noqa: E402
from scheduler.core.perf.data import load_placements  # noqa: E402
from scheduler.core.perf.throughput import ThroughputModel  # noqa: E402
from scheduler.core.perf.validate import predict_rows  # noqa: E402


def shape_sets(tm: ThroughputModel, root: Path) -> list[dict]:
    """One entry per (model, plan, n, N) with two or more measured placements."""
    out = []
    for name, spec in CATALOG.items():
        rows = [r for r in load_placements(root / "placements" / f"{spec.placements}.csv")
                if not r.plan.is_3d]
        sets: dict[tuple[str, int, int], list] = defaultdict(list)
        for result, row in zip(predict_rows(tm, name, rows), rows):
            if len(row.placement) > 1:
                sets[(result.plan, sum(row.placement), len(row.placement))].append(result)
        for (plan, n, nodes), results in sorted(sets.items()):
            if len(results) < 2:
                continue
            measured = {r.placement: r.measured_s for r in results}
            out.append({"model": name, "plan": plan, "gpus": n, "nodes": nodes, "measured_s": measured,
                        "predicted_s": results[0].predicted_s,
                        "spread": max(measured.values()) / min(measured.values()),
                        "fastest": min(measured, key=measured.__getitem__)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", help="traces folder (holding morphling/)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    root = morphling_dir(args.traces)
    tm = ThroughputModel.from_traces(root)
    sets = shape_sets(tm, root)
    for s in sets:
        times = ", ".join(f"{p} {t:.3f}" for p, t in sorted(s["measured_s"].items()))
        print(f"{s['model']:8s} {s['plan']:13s} {s['gpus']} GPUs on {s['nodes']} nodes: measured {times}; "
              f"predicted {s['predicted_s']:.3f}; spread {s['spread']:.2f}x, fastest {s['fastest']}")
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "perf_node_shapes", "sets": sets}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

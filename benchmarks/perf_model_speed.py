"""Performance-model query cost: what a policy pays per call.

Usage::

    .venv/bin/python benchmarks/perf_model_speed.py [--traces DIR] [--json FILE]

Measures, on the Rubick profiles, with ``time.perf_counter``:

* ``fit_seconds``: fitting all seven models (``ThroughputModel.from_traces``);
* ``iter_time_first_us``: one ``iter_time`` call on a configuration not yet
  asked (feature building, the formula), averaged over distinct queries;
* ``iter_time_memo_us``: the same queries asked again (memo hits);
* ``iter_times_batch_us_per_query``: ``iter_times`` on all of them at once;
* ``best_plan_first_us``: ``best_plan`` over the four data-parallel plans on
  a GPU count and placement not yet asked.

The queries cover every model, the four data-parallel plans, 1-64 GPUs on
packed placements, and CPU thread counts 1-8 per GPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.core.perf.__main__ import morphling_dir  # noqa: E402
from scheduler.core.perf.throughput import ThroughputModel, packed_placement  # noqa: E402

DP_PLANS = ("ga", "gc", "zero-dp", "zero-offload")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", help="traces folder (holding morphling/) or the morphling folder")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    root = morphling_dir(args.traces)

    t0 = time.perf_counter()
    tm = ThroughputModel.from_traces(root)
    fit_s = time.perf_counter() - t0

    queries = [(m, p, packed_placement(g), g * c, None)
               for m in tm.models() for p in DP_PLANS for g in range(1, 65) for c in (1, 2, 4, 8)]
    t0 = time.perf_counter()
    for q in queries:
        tm.iter_time(*q)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for q in queries:
        tm.iter_time(*q)
    memo = time.perf_counter() - t0

    batch_model = ThroughputModel.from_traces(root)
    by_model: dict[str, list] = {}
    for m, *rest in queries:
        by_model.setdefault(m, []).append(tuple(rest))
    t0 = time.perf_counter()
    for m, qs in by_model.items():
        batch_model.iter_times(m, qs)
    batch = time.perf_counter() - t0

    plan_model = ThroughputModel.from_traces(root)
    asks = [(m, g) for m in plan_model.models() for g in range(1, 65)]
    t0 = time.perf_counter()
    for m, g in asks:
        plan_model.best_plan(m, DP_PLANS, g, cpus=8 * g)
    best = time.perf_counter() - t0

    result = {
        "command": "python benchmarks/perf_model_speed.py" + (f" --traces {args.traces}" if args.traces else ""),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "queries": len(queries),
        "fit_seconds": round(fit_s, 3),
        "iter_time_first_us": round(1e6 * first / len(queries), 1),
        "iter_time_memo_us": round(1e6 * memo / len(queries), 2),
        "iter_times_batch_us_per_query": round(1e6 * batch / len(queries), 2),
        "best_plan_first_us": round(1e6 * best / len(asks), 1),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Diagnostic: how well the functional form fits when measurements are in the fit.

Usage::

    .venv/bin/python benchmarks/perf_form_capacity.py [--traces DIR] [--folds 5] [--json FILE]

The performance model is fitted from ``profiles/`` only (what
``python -m scheduler.perf validate`` checks). This script asks a different
question: if the seven coefficients were refitted on measured placements
(iteration times only, same loss, the profile fit as the starting point and
the forward curve and intra-node bandwidth kept), how well would the form
predict placements it did not see? Rows are split into ``--folds`` folds by
position (row i in fold i mod k), each fold predicted from a fit on the
others. A low error here and a high one in ``validate`` means the profiles
cannot identify the coefficients; a high error here means the form cannot
express the data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.core.perf import fit as perf_fit  # noqa: E402
from scheduler.core.perf.__main__ import morphling_dir  # noqa: E402
from scheduler.core.perf.catalog import CATALOG  # noqa: E402
from scheduler.core.perf.data import load_placements  # noqa: E402
from scheduler.core.perf.model import Coeffs, features, iter_time_ms  # noqa: E402
from scheduler.core.perf.throughput import ThroughputModel  # noqa: E402
from scheduler.core.perf.validate import OFFLOAD_THREADS  # noqa: E402


def _features(rows, net):
    return features([(r.plan, r.placement, OFFLOAD_THREADS if r.plan.memory == "zero-offload" else 1.0, net)
                     for r in rows])


def cross_validate(tm: ThroughputModel, model: str, rows, folds: int) -> list[float]:
    base = tm.fit(model)
    lower = np.array(list(perf_fit.LOWER.as_dict().values()))
    upper = np.array(list(perf_fit.UPPER.as_dict().values()))
    start = np.clip(np.array(list(base.coeffs.as_dict().values())), lower + 1e-9, np.where(np.isinf(upper), np.inf, upper - 1e-9))
    errors = []
    for k in range(folds):
        train = [r for i, r in enumerate(rows) if i % folds != k]
        test = [r for i, r in enumerate(rows) if i % folds == k]
        f_train = _features(train, base.env.net_gbps)
        y = np.log([1000.0 * r.iter_s for r in train])

        def resid(x: np.ndarray) -> np.ndarray:
            pred = iter_time_ms(f_train, base.inputs, Coeffs(*x), base.forward, base.env)
            return np.log(np.maximum(pred, 1e-9)) - y

        sol = least_squares(resid, start, bounds=(lower, upper), loss="soft_l1", f_scale=perf_fit.F_SCALE)
        pred = iter_time_ms(_features(test, base.env.net_gbps), base.inputs, Coeffs(*sol.x), base.forward, base.env)
        measured = np.array([1000.0 * r.iter_s for r in test])
        errors.extend((np.abs(pred - measured) / measured).tolist())
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    root = morphling_dir(args.traces)
    tm = ThroughputModel.from_traces(root)
    out = {}
    for name, spec in CATALOG.items():
        rows = load_placements(root / "placements" / f"{spec.placements}.csv")
        errs = cross_validate(tm, name, rows, args.folds)
        out[name] = {"rows": len(errs), "avg_pct": round(100 * float(np.mean(errs)), 2),
                     "max_pct": round(100 * float(np.max(errs)), 2)}
        print(f"{name:8} {args.folds}-fold, refitted on placements: avg {out[name]['avg_pct']:.1f} %  "
              f"max {out[name]['max_pct']:.1f} %  ({len(errs)} rows)")
    if args.json:
        result = {"command": f"python benchmarks/perf_form_capacity.py --folds {args.folds}", "models": out}
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

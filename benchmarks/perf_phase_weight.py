"""Leave-one-out check of the fit's phase weight, on the profiling runs only.

Usage::

    .venv/bin/python benchmarks/perf_phase_weight.py [--traces DIR] [--weights 1,0.5,0.25,0.1,0.03]
        [--fixed-nvlink] [--json FILE]

For each weight of the phase residuals (``fit.PHASE_WEIGHT``; the iteration
residual weighs 1) and each model with its own profile, every profiling run
is left out in turn, the model is fitted on the others and the left-out run's
iteration time is predicted. Reported: the mean relative error per model and
over models. The placements are not used, so choosing the weight this way
does not tune the model to its validation data. Coefficients a reduced
profile cannot identify are borrowed from the full-profile fits of the other
models, as ``fit_all`` does; the intra-node bandwidth likewise (or held at
its default for every model with ``--fixed-nvlink``, the earlier form).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.core.perf import fit as perf_fit  # noqa: E402
from scheduler.core.perf.__main__ import morphling_dir  # noqa: E402
from scheduler.core.perf.catalog import CATALOG  # noqa: E402
from scheduler.core.perf.data import load_env_bandwidth, load_profile  # noqa: E402
from scheduler.core.perf.model import Env, features, iter_time_ms  # noqa: E402


def loo_errors(root: Path, weight: float, fit_nvlink: bool = True) -> dict[str, float]:
    env = Env(net_gbps=load_env_bandwidth(root / "profiles" / "env_params.json"))
    perf_fit.PHASE_WEIGHT = weight
    profiles = {n: (s, load_profile(root / "profiles" / s.profile)) for n, s in CATALOG.items()
                if s.profile_model is None}
    pooled = {}
    full = perf_fit.fit_all(profiles, env, fit_nvlink)
    for name, result in full.items():
        for coeff, value in result.fitted_values().items():
            if coeff not in result.borrowed:
                pooled.setdefault(coeff, []).append(value)
    fallback = {k: float(np.median(v)) for k, v in pooled.items()}
    out = {}
    for name, (spec, runs) in profiles.items():
        errs = []
        for i, left_out in enumerate(runs):
            rest = runs[:i] + runs[i + 1:]
            if len({r.gpus for r in rest}) < 2:
                continue
            result = perf_fit.fit_model(spec, rest, env, fallback, fit_nvlink)
            f = features([(left_out.plan, (left_out.gpus,), float(left_out.threads), env.net_gbps)])
            pred = float(iter_time_ms(f, result.inputs, result.coeffs, result.forward, result.env)[0])
            errs.append(abs(pred - left_out.iter_ms) / left_out.iter_ms)
        out[name] = 100.0 * float(np.mean(errs))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces")
    parser.add_argument("--weights", default="1,0.5,0.25,0.1,0.03")
    parser.add_argument("--fixed-nvlink", action="store_true",
                        help="hold the intra-node bandwidth at its default instead of fitting it")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    root = morphling_dir(args.traces)
    chosen = perf_fit.PHASE_WEIGHT
    rows = []
    for w in (float(x) for x in args.weights.split(",")):
        per_model = loo_errors(root, w, not args.fixed_nvlink)
        rows.append({"phase_weight": w, "mean_pct": round(float(np.mean(list(per_model.values()))), 2),
                     "per_model_pct": {k: round(v, 2) for k, v in per_model.items()}})
        print(f"phase weight {w:<5g} leave-one-out iteration error: mean {rows[-1]['mean_pct']:.1f} %  "
              + "  ".join(f"{k} {v:.1f}" for k, v in per_model.items()))
    perf_fit.PHASE_WEIGHT = chosen
    result = {"command": "python benchmarks/perf_phase_weight.py --weights " + args.weights
              + (" --fixed-nvlink" if args.fixed_nvlink else ""),
              "chosen_phase_weight": chosen, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

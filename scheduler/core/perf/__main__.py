"""Command line: ``python -m scheduler.perf validate [--traces DIR] [--json FILE] [--fixed-nvlink] [--sampled N]``.

(``python -m scheduler.core.perf`` is the same program.) ``--traces`` is the
shared traces folder (holding ``morphling/``) or the ``morphling`` folder
itself; by default ``$GPUSCHED_TRACES_DIR``, else ``../shared/traces`` next
to the repository. Exit status: 0 on success, 2 on bad arguments or data.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

from scheduler.core.perf.catalog import CATALOG
from scheduler.core.perf.data import DataError, load_authors_params, load_placements
from scheduler.core.perf.fit import FitError
from scheduler.core.perf.holdout import SAMPLED_PER_MODEL, row_key, sample_all
from scheduler.core.perf.throughput import ThroughputModel
from scheduler.core.perf.validate import render_text, to_json, validate

REPO = Path(__file__).resolve().parents[3]


def morphling_dir(traces: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """The ``morphling`` folder from ``--traces``, the environment or the default."""
    environ = os.environ if environ is None else environ
    base = Path(traces or environ.get("GPUSCHED_TRACES_DIR") or REPO.parent / "shared" / "traces")
    return base if (base / "profiles").is_dir() else base / "morphling"


def run_validate(root: Path, fit_nvlink: bool = True, sampled: int = SAMPLED_PER_MODEL) -> tuple[str, dict]:
    """Fit from ``root/profiles`` and ``sampled`` 3D rows per model, validate on ``root/placements``."""
    tm = ThroughputModel.from_traces(root, fit_nvlink=fit_nvlink, sampled_per_model=sampled)
    placements = {name: load_placements(root / "placements" / f"{spec.placements}.csv")
                  for name, spec in CATALOG.items()}
    seen = {row_key(name, r) for name, rows in sample_all(placements, per_model=sampled).items() for r in rows}
    authors = load_authors_params(root / "profiles" / "fitted_params.csv")
    result = validate(tm, placements, authors, seen)
    return render_text(result), to_json(result)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.perf",
                                     description="Rubick performance model: fit and validate.")
    sub = parser.add_subparsers(dest="command", required=True)
    val = sub.add_parser("validate", help="fit from profiles/, report errors against placements/")
    val.add_argument("--traces", help="traces folder (holding morphling/) or the morphling folder")
    val.add_argument("--json", metavar="FILE", help="also write the full report, rows included, as JSON")
    val.add_argument("--fixed-nvlink", action="store_true",
                     help="hold the intra-node bandwidth at its default for every model instead of fitting it "
                          "(the earlier form, for comparison)")
    val.add_argument("--sampled", type=int, default=SAMPLED_PER_MODEL, metavar="N",
                     help=f"3D placement rows per model the fit may see (default {SAMPLED_PER_MODEL}; "
                          "0: profiles only); every other row is held out")
    args = parser.parse_args(argv)
    if args.sampled < 0:
        parser.error("--sampled must be >= 0")

    root = morphling_dir(args.traces)
    try:
        text, report = run_validate(root, fit_nvlink=not args.fixed_nvlink, sampled=args.sampled)
    except (DataError, FitError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report["traces"] = str(root)
    report["command"] = ("python -m scheduler.perf validate" + (f" --traces {args.traces}" if args.traces else "")
                         + (" --fixed-nvlink" if args.fixed_nvlink else "")
                         + (f" --sampled {args.sampled}" if args.sampled != SAMPLED_PER_MODEL else ""))
    sys.stdout.write(text)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

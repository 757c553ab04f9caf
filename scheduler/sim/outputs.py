"""The simulator's output files (``--json``, ``--jobs-csv``, ``--eta-csv``, ``--report``): checked before a
run, written after it.

A run may take minutes; a path that cannot be written, found only when the results are ready, would lose
them. ``check_output_paths`` finds it first; ``write_outputs`` writes what was asked for.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from scheduler.sim.eta import write_eta_csv
from scheduler.sim.jobs_csv import write_jobs_csv
from scheduler.sim.runner import RunResult


def check_output_paths(paths: Mapping[str, str | None]) -> None:
    """Raise ``ValueError`` naming the option when a file of ``paths`` ({option: path or None}) cannot
    be written there: the name is a folder, or its folder is missing or not writable."""
    for option, path in paths.items():
        if not path:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise ValueError(f"{option}: {path} is a folder, not a file")
        if not os.path.isdir(folder):
            raise ValueError(f"{option}: no folder {folder} to write {os.path.basename(path)} in")
        if not os.access(folder, os.W_OK):
            raise ValueError(f"{option}: the folder {folder} is not writable")


def write_outputs(runs: Sequence[RunResult], *, json_path: str | None = None, jobs_csv: str | None = None,
                  eta_csv: str | None = None, report: str | None = None, command: str = "") -> None:
    """Write each file asked for (``OSError`` when one cannot be written after all)."""
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump([r.to_json() for r in runs], f, indent=2, allow_nan=False)
            f.write("\n")
    if jobs_csv:
        write_jobs_csv(jobs_csv, list(runs))
    if eta_csv:
        write_eta_csv(eta_csv, list(runs))
    if report:
        from scheduler.sim.report import write_report  # plotting only when asked

        write_report(report, list(runs), command=command)

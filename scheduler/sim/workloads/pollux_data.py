"""Readers for the Pollux study's data (``../shared/traces/pollux/``).

Formats: ``pollux/README.md``. A workload file has one row per job
(``name, time, application, num_replicas, batch_size``); an application
folder holds ``placements.csv``, ``scalability.csv`` and one
``validation-<B>.csv`` per measured global batch size ``B``. Every reader
raises ``TraceError`` naming the file, the line and the column of the first
bad row; nothing is skipped. Pure: plain records, no global state, and only
the files the caller names are read.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from scheduler.sim.workloads.canonical import TraceError

WORKLOAD_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
PLACEMENT_COLUMNS = ("placement", "local_bsz", "step_time", "sync_time")
SCALABILITY_COLUMNS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
VALIDATION_COLUMNS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")
_VALIDATION_NAME = re.compile(r"^validation-(\d+)\.csv$")


@dataclass(frozen=True, slots=True)
class PolluxJobRow:
    """One job of a workload file."""

    name: str
    time: float
    application: str
    num_replicas: int
    batch_size: int
    line: int


@dataclass(frozen=True, slots=True)
class Measurement:
    """Step and sync time (s) of one iteration at a placement and per-GPU batch."""

    num_nodes: int
    num_replicas: int
    local_bsz: float
    step_time: float
    sync_time: float
    placement: tuple[int, ...] | None = None
    """GPUs per node, when measured on an exact placement (``placements.csv``)."""


@dataclass(frozen=True, slots=True)
class ValidationRow:
    """One epoch-equivalent of progress of a training run at one batch size."""

    progress: float
    iteration: float
    metric: float
    grad_sqr: float
    grad_var: float


@dataclass(frozen=True, slots=True)
class AppData:
    """Everything measured for one application."""

    name: str
    placements: tuple[Measurement, ...]
    scalability: tuple[Measurement, ...]
    validation: dict[int, tuple[ValidationRow, ...]]


def _rows(path: Path, required: tuple[str, ...]):
    """``(line, row)`` pairs of a CSV file with its header checked."""
    name = os.fspath(path)
    if not path.is_file():
        raise TraceError(name, 0, None, "file not found")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(name, 0, None, f"not UTF-8 text ({exc.reason})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(name, 1, missing[0], f"missing column (header: {', '.join(header) or 'empty'})")
    reader.fieldnames = header
    for row in reader:
        if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
            continue
        yield reader.line_num, {k: (v or "").strip() for k, v in row.items() if isinstance(k, str)}


def _number(name: str, line: int, row: dict[str, str], column: str, *, positive: bool = False,
            non_negative: bool = False, integer: bool = False) -> float:
    raw = row.get(column, "")
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(name, line, column, f"not a number: {raw!r}") from None
    if not math.isfinite(value):
        raise TraceError(name, line, column, f"not a finite number: {raw!r}")
    if integer and value != int(value):
        raise TraceError(name, line, column, f"not an integer: {raw!r}")
    if positive and value <= 0:
        raise TraceError(name, line, column, f"must be > 0, got {raw}")
    if non_negative and value < 0:
        raise TraceError(name, line, column, f"must be >= 0, got {raw}")
    return value


def load_workload(path: str | os.PathLike[str], known_apps: set[str] | None = None) -> list[PolluxJobRow]:
    """Jobs of a workload file, in file order; ``known_apps`` (if given) are
    the only applications accepted. Duplicate names are rejected."""
    p = Path(path)
    name = os.fspath(p)
    out: list[PolluxJobRow] = []
    seen: dict[str, int] = {}
    for line, row in _rows(p, WORKLOAD_COLUMNS):
        job = row["name"]
        if not job:
            raise TraceError(name, line, "name", "empty job name")
        if job in seen:
            raise TraceError(name, line, "name", f"duplicate job {job!r} (first on line {seen[job]})")
        seen[job] = line
        app = row["application"]
        if known_apps is not None and app not in known_apps:
            raise TraceError(name, line, "application", f"unknown application {app!r}; known: "
                             f"{', '.join(sorted(known_apps))}")
        out.append(PolluxJobRow(
            job, _number(name, line, row, "time", non_negative=True), app,
            int(_number(name, line, row, "num_replicas", positive=True, integer=True)),
            int(_number(name, line, row, "batch_size", positive=True, integer=True)), line))
    if not out:
        raise TraceError(name, 2, None, "no jobs")
    return out


def _placement(name: str, line: int, raw: str) -> tuple[int, ...]:
    if not (raw.isascii() and raw.isdigit()) or "0" in raw:
        raise TraceError(name, line, "placement", f"expected digits 1-9 (GPUs per node), got {raw!r}")
    return tuple(int(c) for c in raw)


def _measurements(path: Path, exact: bool) -> tuple[Measurement, ...]:
    name = os.fspath(path)
    out = []
    for line, row in _rows(path, PLACEMENT_COLUMNS if exact else SCALABILITY_COLUMNS):
        step = _number(name, line, row, "step_time", positive=True)
        sync = _number(name, line, row, "sync_time", non_negative=True)
        if sync > step:
            raise TraceError(name, line, "sync_time", f"{sync} exceeds step_time {step}")
        bsz = _number(name, line, row, "local_bsz", positive=True)
        if exact:
            where = _placement(name, line, row["placement"])
            out.append(Measurement(len(where), sum(where), bsz, step, sync, where))
        else:
            nodes = int(_number(name, line, row, "num_nodes", positive=True, integer=True))
            replicas = int(_number(name, line, row, "num_replicas", positive=True, integer=True))
            if replicas < nodes:
                raise TraceError(name, line, "num_replicas", f"{replicas} GPUs cannot span {nodes} nodes")
            out.append(Measurement(nodes, replicas, bsz, step, sync))
    if not out:
        raise TraceError(name, 2, None, "no measurements")
    return tuple(out)


def _validation(path: Path) -> tuple[ValidationRow, ...]:
    name = os.fspath(path)
    out = []
    for line, row in _rows(path, VALIDATION_COLUMNS):
        r = ValidationRow(
            _number(name, line, row, "progress", positive=True),
            _number(name, line, row, "iteration", positive=True),
            _number(name, line, row, "metric"),
            _number(name, line, row, "grad_sqr", non_negative=True),
            _number(name, line, row, "grad_var", non_negative=True),
        )
        if out and r.progress < out[-1].progress:
            raise TraceError(name, line, "progress", f"decreases ({r.progress} after {out[-1].progress})")
        out.append(r)
    if not out:
        raise TraceError(name, 2, None, "no rows")
    return tuple(out)


def load_app(folder: str | os.PathLike[str]) -> AppData:
    """One application folder (``apps/<name>``)."""
    root = Path(folder)
    if not root.is_dir():
        raise TraceError(os.fspath(root), 0, None, "application folder not found")
    validation = {}
    for f in sorted(root.iterdir()):
        m = _VALIDATION_NAME.match(f.name)
        if m:
            validation[int(m.group(1))] = _validation(f)
    if not validation:
        raise TraceError(os.fspath(root / "validation-<B>.csv"), 0, None, "no validation runs")
    return AppData(root.name, _measurements(root / "placements.csv", True),
                   _measurements(root / "scalability.csv", False), dict(sorted(validation.items())))


def load_apps(apps_dir: str | os.PathLike[str]) -> dict[str, AppData]:
    """Every application folder under ``apps_dir``, by name."""
    root = Path(apps_dir)
    if not root.is_dir():
        raise TraceError(os.fspath(root), 0, None, "applications folder not found")
    return {d.name: load_app(d) for d in sorted(root.iterdir()) if d.is_dir()}

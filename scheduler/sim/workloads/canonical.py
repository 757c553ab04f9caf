"""Loader for the canonical job-trace CSV (``../shared/traces/README.md`` §1).

One row per job, header required, extra columns ignored. A malformed row is
rejected with ``TraceError`` naming the file, the line and the column; nothing
is skipped silently. Pure: no Django, usable by the portal to validate uploads.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.core.dependencies import DependencyError, parse
from scheduler.core.model import JobClass, JobSpec
from scheduler.sim.workloads.types import SimJob, Workload, sort_jobs

REQUIRED_COLUMNS = ("job_id", "submit_time", "duration", "num_gpus", "job_class")
OPTIONAL_COLUMNS = ("num_cpus", "mem_gb", "grace_period", "user", "tenant", "priority", "dependency")


class TraceError(ValueError):
    """A trace the loader refuses; ``str()`` is ``source:line: column 'x': message``."""

    def __init__(self, source: str, line: int, column: str | None, message: str) -> None:
        self.source = source
        self.line = line
        self.column = column
        self.message = message
        where = f"{source}:{line}"
        super().__init__(f"{where}: column {column!r}: {message}" if column else f"{where}: {message}")

    def __reduce__(self):  # keep it picklable (task queues pass errors around)
        return (TraceError, (self.source, self.line, self.column, self.message))


def load_canonical(path: str | os.PathLike[str]) -> Workload:
    """Read a canonical trace file; raise ``TraceError`` on the first bad row."""
    name = os.fspath(path)
    try:
        f = open(name, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise TraceError(name, 0, None, f"cannot open: {e.strerror}") from None
    try:
        with f:
            return parse_canonical(f, source=name)
    except UnicodeDecodeError as e:
        raise TraceError(name, 0, None, f"not UTF-8 text ({e.reason})") from None


def parse_canonical(lines: Iterable[str], source: str = "<trace>") -> Workload:
    """Parse canonical CSV text (an open file or any iterable of lines).

    ``source`` names the input in error messages. Returns the jobs in arrival
    order; raises ``TraceError`` for a missing required column, an empty file,
    or a row with a bad value or a duplicate ``job_id``.
    """
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise TraceError(source, 1, None, "empty file: a header row is required")
    columns = {name.strip(): i for i, name in enumerate(header)}
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise TraceError(
            source, reader.line_num, missing[0], f"missing required column (header has: {', '.join(header)})"
        )
    seen: set[str] = set()
    jobs: list[SimJob] = []
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue  # a blank line carries no job
        job = _parse_row(row, columns, _Where(source, reader.line_num))
        if job.spec.id in seen:
            raise TraceError(source, reader.line_num, "job_id", f"duplicate id {job.spec.id!r}")
        seen.add(job.spec.id)
        jobs.append(job)
    return Workload(name=f"trace {os.path.basename(source)} (canonical, {len(jobs)} jobs)", jobs=sort_jobs(jobs))


@dataclass(frozen=True, slots=True)
class _Where:
    source: str
    line: int

    def error(self, column: str | None, message: str) -> TraceError:
        return TraceError(self.source, self.line, column, message)


def _parse_row(row: list[str], columns: dict[str, int], where: _Where) -> SimJob:
    def cell(name: str) -> str | None:
        i = columns.get(name)
        if i is None:
            return None
        if i >= len(row):
            return ""
        return row[i].strip()

    job_id = cell("job_id")
    if not job_id:
        raise where.error("job_id", "empty id")
    # Checked in column order, so the first bad cell of a row is the one named.
    submit = _number(cell("submit_time"), "submit_time", where, minimum=0.0)
    duration = _number(cell("duration"), "duration", where, minimum=0.0)
    if duration <= 0:
        raise where.error("duration", f"duration must be > 0, got {cell('duration')!r}")
    gpus = _integer(cell("num_gpus"), "num_gpus", where, minimum=0)
    klass = cell("job_class")
    try:
        job_class = JobClass(klass)
    except ValueError:
        raise where.error("job_class", f"unknown class {klass!r} (expected TE or BE)") from None
    spec = JobSpec(
        id=job_id,
        job_class=job_class,
        num_gpus=gpus,
        submit_time=submit,
        num_cpus=_optional_number(cell("num_cpus"), "num_cpus", where),
        mem_gb=_optional_number(cell("mem_gb"), "mem_gb", where),
        grace_period=_optional_number(cell("grace_period"), "grace_period", where),
        priority=_optional_integer(cell("priority"), "priority", where),
        user=cell("user") or "",
        tenant=cell("tenant") or "",
        dependencies=_dependencies(cell("dependency"), where),
    )
    return SimJob(spec=spec, duration=duration)


def _dependencies(text: str | None, where: _Where) -> tuple:
    """Slurm's afterok/afterany text naming other rows' job ids (``scheduler.sim.dependencies`` checks them)."""
    try:
        return parse(text or "")
    except DependencyError as exc:
        raise where.error("dependency", str(exc)) from None


def _number(text: str | None, column: str, where: _Where, minimum: float | None = None) -> float:
    if text is None or text == "":
        raise where.error(column, "missing value")
    try:
        value = float(text)
    except ValueError:
        raise where.error(column, f"bad number {text!r}") from None
    if not math.isfinite(value):
        raise where.error(column, f"bad number {text!r} (not finite)")
    if minimum is not None and value < minimum:
        raise where.error(column, f"must be >= {minimum:g}, got {text!r}")
    return value


def _integer(text: str | None, column: str, where: _Where, minimum: int | None = None) -> int:
    if text is None or text == "":
        raise where.error(column, "missing value")
    try:
        value = int(text)
    except ValueError:
        try:
            as_float = float(text)
        except ValueError:
            raise where.error(column, f"bad integer {text!r}") from None
        if not as_float.is_integer():
            raise where.error(column, f"bad integer {text!r}") from None
        value = int(as_float)
    if minimum is not None and value < minimum:
        raise where.error(column, f"must be >= {minimum}, got {text!r}")
    return value


def _optional_number(text: str | None, column: str, where: _Where) -> float:
    if text is None or text == "":
        return 0.0
    return _number(text, column, where, minimum=0.0)


def _optional_integer(text: str | None, column: str, where: _Where) -> int:
    if text is None or text == "":
        return 0
    return _integer(text, column, where)

"""Adapter for the processed Microsoft Philly trace (``philly/philly.csv``).

The trace has no job class, grace period or user; the virtual cluster
(column ``cluster``) becomes the job's ``tenant``. :class:`PhillyRule` derives
them by a documented, seeded rule:

* a job is **TE** when it is small and short: at most ``te_max_gpus`` GPUs and
  at most ``te_max_duration`` seconds of run time (what a person launches and
  watches); every other job is **BE**;
* every job's grace period is drawn uniformly from ``grace_choices`` by a
  generator seeded with ``(seed, job id)``, so a window of the trace keeps the
  draws of the whole trace.

Job ids are ``philly-<line>`` (the CSV line number); submit times are seconds
since the first submission of the whole trace. ``window=(start, end)`` keeps the
jobs submitted in ``[start, end)`` seconds and shifts them to start at 0.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone

from scheduler.core.model import JobClass, JobSpec
from scheduler.sim.workloads.canonical import TraceError
from scheduler.sim.workloads.grace import GRACE_CHOICES, draw_grace, job_rng
from scheduler.sim.workloads.types import SimJob, Workload, sort_jobs

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus")
TENANT_COLUMN = "cluster"
"""The virtual cluster a job ran in: its tenant (fair share among virtual
clusters is what Philly's scheduler enforced)."""
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class PhillyRule:
    """How TE/BE and grace periods are derived from a Philly row."""

    te_max_gpus: int = 2
    te_max_duration: float = 900.0
    grace_choices: tuple[float, ...] = GRACE_CHOICES
    seed: int = 0

    def describe(self) -> str:
        graces = ", ".join(f"{g:g}" for g in self.grace_choices)
        return (
            f"TE = jobs with <= {self.te_max_gpus} GPUs and duration <= {self.te_max_duration:g} s, "
            f"else BE; grace uniform over {{{graces}}} s seeded by (seed={self.seed}, job id)"
        )

    def job_class(self, num_gpus: int, duration: float) -> JobClass:
        if num_gpus <= self.te_max_gpus and duration <= self.te_max_duration:
            return JobClass.TE
        return JobClass.BE


def load_philly(
    path: str | os.PathLike[str],
    rule: PhillyRule | None = None,
    window: tuple[float, float] | None = None,
) -> Workload:
    """Read ``philly.csv`` and derive classes and grace periods by ``rule``.

    Raises ``TraceError`` (file, line, column) on a malformed row.
    """
    rule = rule or PhillyRule()
    name = os.fspath(path)
    rows = _read_rows(name)
    if not rows:
        raise TraceError(name, 1, None, "no jobs in the trace")
    origin = min(t for _, t, _, _, _ in rows)
    jobs: list[SimJob] = []
    for line, stamp, duration, gpus, tenant in rows:
        submit = stamp - origin
        if window is not None:
            if not (window[0] <= submit < window[1]):
                continue
            submit -= window[0]
        job_id = f"philly-{line}"
        spec = JobSpec(
            id=job_id,
            job_class=rule.job_class(gpus, duration),
            num_gpus=gpus,
            submit_time=submit,
            grace_period=draw_grace(job_rng(rule.seed, job_id), rule.grace_choices),
            tenant=tenant,
        )
        jobs.append(SimJob(spec=spec, duration=duration))
    workload = Workload(name="", jobs=sort_jobs(jobs))
    span = "whole trace" if window is None else f"window [{window[0]:g} s, {window[1]:g} s)"
    label = f"philly {os.path.basename(name)} ({span}, {len(jobs)} jobs, TE share {100 * workload.te_share:.1f} %)"
    return Workload(name=label, jobs=workload.jobs, notes=(f"Philly class rule: {rule.describe()}",))


def _read_rows(name: str) -> list[tuple[int, float, float, int, str]]:
    """(line, submit epoch seconds, duration, GPUs, virtual cluster) per row,
    validated; the virtual cluster is empty when the column is absent."""
    try:
        f = open(name, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise TraceError(name, 0, None, f"cannot open: {e.strerror}") from None
    with f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise TraceError(name, 1, None, "empty file: a header row is required")
        columns = {c.strip(): i for i, c in enumerate(header)}
        for c in PHILLY_COLUMNS:
            if c not in columns:
                raise TraceError(name, 1, c, "missing required column")
        it, id_, ig = (columns[c] for c in PHILLY_COLUMNS)
        ic = columns.get(TENANT_COLUMN)
        rows = []
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            line = reader.line_num
            rows.append(
                (
                    line,
                    _timestamp(_cell(row, it), name, line),
                    _duration(_cell(row, id_), name, line),
                    _gpus(_cell(row, ig), name, line),
                    _cell(row, ic) if ic is not None else "",
                )
            )
    return rows


def _cell(row: list[str], i: int) -> str:
    return row[i].strip() if i < len(row) else ""


def _timestamp(text: str, name: str, line: int) -> float:
    try:
        return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise TraceError(name, line, "timestamp", f"bad time {text!r} (expected {_TIME_FORMAT})") from None


def _duration(text: str, name: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(name, line, "duration", f"bad number {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise TraceError(name, line, "duration", f"duration must be > 0, got {text!r}")
    return value


def _gpus(text: str, name: str, line: int) -> int:
    try:
        value = int(float(text))
    except ValueError:
        raise TraceError(name, line, "num_gpus", f"bad integer {text!r}") from None
    if value < 0 or value != float(text):
        raise TraceError(name, line, "num_gpus", f"must be an integer >= 0, got {text!r}")
    return value

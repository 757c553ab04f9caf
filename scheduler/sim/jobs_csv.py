"""``--jobs-csv FILE``: one row per attempt of every job, for anyone to check
fairness and latency with their own code.

Columns: ``policy, job_id, tenant, user, job_class, num_gpus, submit_time,
attempt, start_time, end_time, outcome``; ``attempt`` counts from 1 per job;
``outcome`` is ``completed``, ``preempted`` (a preemption notice ended it; the
job queued again) or ``reconfigured`` (stopped to relaunch on another
allocation). ``policy`` is the run's label, so several policies share a file.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence

COLUMNS = ("policy", "job_id", "tenant", "user", "job_class", "num_gpus", "submit_time", "attempt",
           "start_time", "end_time", "outcome")


def attempt_rows(run) -> list[tuple]:
    """The rows of one run (``RunResult`` with an attempt log), in time order."""
    specs = {j.spec.id: j.spec for j in run.workload.jobs}
    notices = {(p.job_id, p.time) for p in run.sim.preemptions}
    count: dict[str, int] = {}
    rows = []
    for a in sorted(run.sim.attempts or (), key=lambda a: (a.start, a.job_id, a.end)):
        spec = specs[a.job_id]
        count[a.job_id] = count.get(a.job_id, 0) + 1
        if a.notice is None:
            outcome = "completed"
        elif (a.job_id, a.notice) in notices:
            outcome = "preempted"
        else:
            outcome = "reconfigured"
        rows.append((run.policy, a.job_id, spec.tenant, spec.user, spec.job_class.value, a.placement.num_gpus,
                     spec.submit_time, count[a.job_id], a.start, a.end, outcome))
    return rows


def write_jobs_csv(path: str, runs: Sequence) -> None:
    """Write every run's attempts to ``path``."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(COLUMNS)
        for run in runs:
            out.writerows(attempt_rows(run))

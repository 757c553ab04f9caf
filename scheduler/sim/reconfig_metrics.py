"""Metrics of a run over reconfigurable jobs (the Rubick workloads).

* **Guaranteed-job violation**: a guaranteed job whose completion time
  exceeds ``(1 + VIOLATION_TOLERANCE)`` times its duration, the time it
  needs on its requested plan and GPUs from submission. A guaranteed job is
  promised at least the throughput of its request; finishing later than that
  request would have, run at once, means waiting or running slower.
* **Guaranteed jobs run slower than requested**: guaranteed jobs that ran
  some attempt at less than the throughput of their request (the promise a
  policy can keep whatever the load; waiting is not counted here).
* **Model fallbacks**: attempts (a start or a reconfiguration of a job)
  whose iteration time the simulator took from the performance model because
  that plan and placement were not measured, and the share of job time spent
  in them.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.metrics import mean, percentile
from scheduler.sim.records import SimResult
from scheduler.sim.workloads.types import Workload

VIOLATION_TOLERANCE = 0.05


def is_reconfigurable_workload(workload: Workload) -> bool:
    """Jobs whose true speed depends on their allocation and whose
    throughput the policies see (the Morphling workloads); the Pollux
    study's TunedJobs also run at their placement's speed, but nothing about them
    is for a policy to reconfigure."""
    return any(j.speed is not None and j.spec.throughput is not None for j in workload.jobs)


def reconfiguration_summary(workload: Workload, sim: SimResult) -> dict | None:
    """The ``reconfiguration`` object of the JSON (None for other workloads)."""
    if not is_reconfigurable_workload(workload):
        return None
    guaranteed = {j.spec.id for j in workload.jobs if j.spec.guaranteed}
    late = [
        o.job_id for o in sim.outcomes
        if o.job_id in guaranteed and o.jct > (1.0 + VIOLATION_TOLERANCE) * o.duration
    ]
    jct = sorted(o.jct for o in sim.outcomes)
    return {
        "jct_mean_seconds": mean(jct),
        "jct_p99_seconds": percentile(jct, 99),
        "guaranteed_jobs": len(guaranteed),
        "guaranteed_violations": len(late),
        "guaranteed_below_request": len(guaranteed & sim.below_request),
        "reconfigurations": sim.reconfigurations,
        "attempts": sim.timed_attempts,
        "model_fallback_attempts": sim.modelled_attempts,
        "model_fallback_time_share": sim.modelled_seconds / sim.timed_seconds if sim.timed_seconds else 0.0,
    }


def reconfiguration_table(runs: Sequence) -> str:
    """One row per run: the figures the Rubick comparison reports."""
    header = ["policy", "JCT mean h", "JCT p99 h", "makespan h", "guar. late", "guar. slow", "reconfigs", "preempt",
              "lost GPU-h", "util %", "model fallbacks", "wall s"]
    rows = []
    for r in runs:
        s = reconfiguration_summary(r.workload, r.sim)
        if s is None:
            continue
        rows.append([
            r.policy,
            f"{s['jct_mean_seconds'] / 3600:.2f}",
            f"{s['jct_p99_seconds'] / 3600:.2f}",
            f"{r.makespan_seconds / 3600:.2f}",
            f"{s['guaranteed_violations']}/{s['guaranteed_jobs']}",
            f"{s['guaranteed_below_request']}/{s['guaranteed_jobs']}",
            str(s["reconfigurations"]),
            str(r.preemptions),
            f"{r.sim.lost_gpu_seconds / 3600:.1f}",
            f"{100 * r.gpu_utilization:.1f}",
            f"{s['model_fallback_attempts']}/{s['attempts']} ({100 * s['model_fallback_time_share']:.1f} % of time)",
            f"{r.wall_seconds:.1f}",
        ])
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) if rows else len(header[i]) for i in range(len(header))]
    lines = [" | ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))),
             "-|-".join("-" * w for w in widths)]
    lines += [" | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
              for row in rows]
    return "\n".join(lines)

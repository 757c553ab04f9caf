"""Whether a policy has anything of its own to do on a workload.

Pollux and Optimus resize adaptive jobs, Rubick and ``fitgpp-shrink`` reconfigurable ones (a policy's
``resizes``); on a workload with no such job each runs every job at the size it asked for, and its
figures say nothing of what it is for. A run says so rather than let its numbers be read as the
policy's.
"""

from __future__ import annotations

from scheduler.sim.workloads.types import Workload

#: What each kind of job is, in the words a run's note uses.
KINDS = {
    "adaptive": "adaptive jobs (an adaptive profile, as the Pollux workloads' with --pollux-jobs adaptive)",
    "reconfigurable": "reconfigurable jobs (a model and an execution plan, as the Morphling workloads')",
}


def has_kind(workload: Workload, kind: str) -> bool:
    """Whether any job of ``workload`` is ``adaptive`` or ``reconfigurable``."""
    if kind == "adaptive":
        return any(job.spec.adaptive is not None for job in workload.jobs)
    return any(job.spec.throughput is not None for job in workload.jobs)


def idle_note(policy: object, label: str, workload: Workload) -> str | None:
    """A note when ``policy`` resizes a kind of job ``workload`` has none of; None otherwise."""
    kind = getattr(policy, "resizes", None)
    if kind is None or has_kind(workload, kind):
        return None
    return (f"{label} resizes only {KINDS[kind]}; this workload has none, so it ran every job at the size it "
            f"asked for and its figures are not those of {label} at work.")

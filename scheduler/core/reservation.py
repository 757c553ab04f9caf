"""Anti-starvation: a reservation for the oldest pending job of a queue.

A non-blocking queue lets small jobs overtake a large one forever: whenever a
few GPUs free up, a small job behind takes them. When the oldest eligible job
has waited longer than the starvation threshold and does not fit now, it gets
a reservation: the node set where it should fit soonest. Other jobs of its
queue may not start on those nodes until it starts, so they drain.

"Soonest" cannot use true run times (no policy knows them). A job's expected
end is known only when it is vacating (notice time plus grace period) or
declared a time limit (now plus the work still allowed); otherwise it is
unknown (infinite). For a job that fits on one node, the node reached first by
releasing its jobs in order of expected end wins; ties (typically all unknown)
go to the node that is short of the fewest GPUs, then by name. A job too big
for any single node reserves the nodes with the most free units first, until
their total capacity holds it.

Recomputed from the snapshot every cycle (policies keep no state). It stays
put in practice: the reserved nodes only drain while others are refilled by
the jobs behind, so the same nodes keep the best key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from scheduler.core.model import Node, PendingJob, RunningJob
from scheduler.core.placement import INF, FreeCapacity, per_unit, units_of


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for ``job_id``; ``ready`` is the estimated time it fits there
    (``inf`` when some end on the way is unknown)."""

    job_id: str
    nodes: frozenset[str]
    ready: float
    waited: float


def capacity_units(node: Node, cpg: float, mpg: float) -> int:
    """Units of a job shape an empty ``node`` can hold."""
    return units_of(node.gpus, node.cpus if node.cpus > 0 else INF, node.mem_gb if node.mem_gb > 0 else INF, cpg, mpg)


def expected_end(job: RunningJob, now: float) -> float:
    """When a running job is expected to release its resources (``inf``: unknown)."""
    spec = job.spec
    if job.preempting:
        notice = job.notice_time if job.notice_time is not None else now
        return max(now, notice + spec.grace_period)
    if spec.time_limit is not None:
        return now + max(0.0, spec.time_limit - job.progress)
    return INF


def reserve(
    job: PendingJob,
    nodes: Sequence[Node],
    cap: FreeCapacity,
    running: Iterable[RunningJob],
    now: float,
) -> Reservation | None:
    """The reservation for ``job``, or None when it can never fit the cluster."""
    spec = job.spec
    cpg, mpg = per_unit(spec)
    need = spec.num_gpus
    capacity = {n.name: capacity_units(n, cpg, mpg) for n in nodes}
    if sum(capacity.values()) < need:
        return None
    waited = now - spec.submit_time
    single = [name for name, u in capacity.items() if u >= need]
    if not single:
        order = sorted(capacity, key=lambda n: (-cap.units(n, cpg, mpg), n))
        chosen: list[str] = []
        total = 0
        for name in order:
            chosen.append(name)
            total += capacity[name]
            if total >= need:
                break
        return Reservation(spec.id, frozenset(chosen), INF, waited)
    wanted = set(single)
    releases: dict[str, list[tuple[float, int, float, float]]] = {}
    for r in running:
        rs = r.spec
        end = expected_end(r, now)
        g = rs.num_gpus
        for name, k in r.placement.parts:
            if name in wanted:
                releases.setdefault(name, []).append((end, k, rs.num_cpus * k / g, rs.mem_gb * k / g))
    best_key: tuple[float, int, str] | None = None
    for name in single:
        g, c, m = cap.gpus[name], cap.cpus(name), cap.mem(name)
        short = need - units_of(max(g, 0), c, m, cpg, mpg)
        ready = now
        if short > 0:
            ready = INF
            for end, k, kc, km in sorted(releases.get(name, ())):
                g, c, m = g + k, c + kc, m + km
                if units_of(g, c, m, cpg, mpg) >= need:
                    ready = end
                    break
        key = (ready, short, name)
        if best_key is None or key < best_key:
            best_key = key
    assert best_key is not None
    return Reservation(spec.id, frozenset((best_key[2],)), best_key[0], waited)

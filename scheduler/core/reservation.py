"""Anti-starvation: a reservation for the oldest pending job of a queue.

A non-blocking queue lets small jobs overtake a large one forever: whenever a
few GPUs free up, a small job behind takes them. When the oldest eligible job
has waited longer than the starvation threshold and does not fit now, it gets
a reservation: the node set where it should fit soonest. Other jobs of its
queue may not start on those nodes until it starts, so they drain.

"Soonest" cannot use true run times (no policy knows them). For a job that
fits on one node, the node short of the fewest units (GPUs, with CPU and
memory) wins: it needs the fewest releases. Ties go to the node reached first
by releasing its jobs in order of expected end, which is known only for a job
vacating (notice time plus grace period) or one that declared a time limit
(now plus the work still allowed); then by name. A job too big for any single
node reserves the nodes with the most free units first, until their total
capacity holds it.

Recomputed from the snapshot every cycle (policies keep no state). It stays
put in practice: the reserved nodes only drain while others are refilled by
the jobs behind, so the same nodes keep the best key.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable, Sequence

from scheduler.core.model import NodeCapacity, PendingJob, RunningJob
from scheduler.core.placement import INF, FreeCapacity, per_unit, units_of


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for ``job_id``, a job waiting past the starvation threshold."""

    job_id: str
    nodes: frozenset[str]


def capacity_units(node: NodeCapacity, cpg: float, mpg: float) -> int:
    """Units of a job shape an empty ``node`` can hold."""
    if not (cpg or mpg):
        return node.gpus
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
    nodes: Sequence[NodeCapacity],
    cap: FreeCapacity,
    running: Iterable[RunningJob],
    now: float,
) -> Reservation | None:
    """The reservation for ``job``, or None when it can never fit the cluster."""
    spec = job.spec
    cpg, mpg = per_unit(spec)
    need = spec.num_gpus
    plain = not (cpg or mpg)
    # Computed in every cycle while a job starves (every decide call of a simulated busy
    # cluster): plain jobs read the nodes' GPU counts directly, without a map of capacities.
    if plain:
        single = [n.name for n in nodes if n.gpus >= need]
    else:
        capacity = {n.name: capacity_units(n, cpg, mpg) for n in nodes}
        single = [name for name, u in capacity.items() if u >= need]
    gpus = cap.gpus
    if not single:  # (a node holding the job would hold it in the cluster too)
        if plain:
            capacity = {n.name: n.gpus for n in nodes}
        if sum(capacity.values()) < need:
            return None
        # Most free units first (then name), taken until their capacity holds the job: a heap
        # popped a few times, not a sort of every node, since this runs in every cycle while a
        # large job starves.
        if plain:
            order = [(-gpus[n], n) for n in capacity]
        else:
            order = [(-cap.units(n, cpg, mpg), n) for n in capacity]
        heapq.heapify(order)
        chosen: list[str] = []
        total = 0
        while total < need:
            name = heapq.heappop(order)[1]
            chosen.append(name)
            total += capacity[name]
        return Reservation(spec.id, frozenset(chosen))
    # Fewest units short first; expected ends (known only for vacating jobs
    # and declared time limits) break ties, so running jobs are scanned only
    # when several nodes are equally close.
    if plain:
        short = {name: need - gpus[name] for name in single}
    else:
        short = {name: need - cap.units(name, cpg, mpg) for name in single}
    fewest = min(short.values())
    tied = sorted(name for name in single if short[name] == fewest)
    if len(tied) == 1 or fewest <= 0:
        return Reservation(spec.id, frozenset(tied[:1]))
    wanted = set(tied)
    releases: dict[str, list[tuple[float, int, float, float]]] = {}
    for r in running:
        rs = r.spec
        if not r.preempting and rs.time_limit is None:
            continue  # unknown end: cannot make a node ready sooner
        end = expected_end(r, now)
        g = rs.num_gpus
        for name, k in r.placement.parts:
            if name in wanted:
                releases.setdefault(name, []).append((end, k, rs.num_cpus * k / g, rs.mem_gb * k / g))
    best_key: tuple[float, str] | None = None
    for name in tied:
        g, c, m = cap.gpus[name], cap.cpus(name), cap.mem(name)
        ready = INF
        for end, k, kc, km in sorted(releases.get(name, ())):
            g, c, m = g + k, c + kc, m + km
            if units_of(max(g, 0), c, m, cpg, mpg) >= need:
                ready = end
                break
        key = (ready, name)
        if best_key is None or key < best_key:
            best_key = key
    assert best_key is not None
    return Reservation(spec.id, frozenset((best_key[1],)))

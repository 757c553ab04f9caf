"""What the allocation policies for adaptive jobs share (Optimus, Pollux):
the jobs they reallocate, packing GPU counts onto nodes, and turning a new
allocation into decisions.

Both policies recompute every adaptive job's allocation each round; a job
whose allocation is unchanged gets no decision, a running job that loses all
its GPUs is preempted (``Preempt``, no grace: it keeps its progress), one
whose GPUs change is reconfigured (``Reconfigure``, paying its restart), and
a pending job that gets GPUs starts. Jobs that are not adaptive keep the
GPUs they hold; pending ones start in arrival order, first fit, in the GPUs
the adaptive jobs leave (``plain_starts``).
"""

from __future__ import annotations

import math

from dataclasses import dataclass

from scheduler.core.adaptive import AdaptiveModel
from scheduler.core.decisions import Decision, Pend, Preempt, Reason, Reconfigure, Start
from scheduler.core.model import JobSpec, Placement, Snapshot
from scheduler.core.placement import FreeCapacity, free_from_running
from scheduler.core.queue_order import by_priority


@dataclass(frozen=True, slots=True)
class AdaptiveView:
    """One adaptive job as an allocation policy sees it."""

    spec: JobSpec
    model: AdaptiveModel
    progress: float
    current: dict[str, int]
    """GPUs it holds per node (empty when pending)."""
    restarts: int
    """Allocation changes after its first start (reconfigurations and preemptions)."""
    started: float = -math.inf
    """When its current attempt started (running jobs)."""
    attained: float | None = None
    """GPU-seconds it has held, as the snapshot counts them (None: not counted there)."""
    most_gpus: int | None = None
    """The most GPUs it has held, as the snapshot counts them (None: not counted there)."""

    @property
    def id(self) -> str:
        return self.spec.id


def adaptive_jobs(snapshot: Snapshot) -> list[AdaptiveView]:
    """The adaptive jobs to allocate: running (not stopping) and pending, in
    submission order."""
    views = []
    for r in snapshot.running:
        if r.spec.adaptive is not None and not r.preempting and not r.reconfiguring:
            views.append(AdaptiveView(r.spec, r.spec.adaptive, r.progress, dict(r.placement.parts),
                                      r.preemptions + r.reconfigurations, r.attempt_start, r.attained, r.most_gpus))
    for p in snapshot.pending:
        if p.spec.adaptive is not None and p.hold_reason is None:
            views.append(AdaptiveView(p.spec, p.spec.adaptive, p.progress, {},
                                      p.preemptions, attained=p.attained, most_gpus=p.most_gpus))
    views.sort(key=lambda v: (v.spec.submit_time, v.id))
    return views


def capacity(snapshot: Snapshot) -> dict[str, int]:
    """GPUs per node that adaptive jobs may share: free ones plus those the
    adaptive jobs hold now."""
    free = {n.name: n.gpus for n in snapshot.nodes}
    for r in snapshot.running:
        if r.spec.adaptive is None or r.preempting or r.reconfiguring:
            for node, g in r.placement.parts:
                free[node] -= g
    return free


def pack(counts: dict[str, int], views: list[AdaptiveView], free: dict[str, int]) -> dict[str, dict[str, int]]:
    """Node placements for GPU ``counts`` (job id -> GPUs, total within
    ``free``): a job whose count is unchanged keeps its nodes; the others,
    largest first, go on the single node that fits tightest, or else fill
    the nodes with the most free GPUs. Always succeeds."""
    left = dict(free)
    out: dict[str, dict[str, int]] = {}
    by_id = {v.id: v for v in views}
    for jid, g in counts.items():
        cur = by_id[jid].current
        if g and sum(cur.values()) == g and all(left.get(n, 0) >= k for n, k in cur.items()):
            out[jid] = dict(cur)
            for n, k in cur.items():
                left[n] -= k
    order = sorted((jid for jid, g in counts.items() if g and jid not in out), key=lambda j: (-counts[j], j))
    for jid in order:
        g = counts[jid]
        fits = [n for n in sorted(left) if left[n] >= g]
        if fits:
            node = min(fits, key=lambda n: (left[n], n))
            out[jid] = {node: g}
            left[node] -= g
            continue
        place: dict[str, int] = {}
        for n in sorted(left, key=lambda n: (-left[n], n)):
            if g == 0:
                break
            k = min(g, left[n])
            if k:
                place[n] = k
                left[n] -= k
                g -= k
        if g:
            raise ValueError(f"cannot place {counts[jid]} GPUs for {jid}: counts exceed the free GPUs")
        out[jid] = place
    return out


def spread(counts: dict[str, int], views: list[AdaptiveView], free: dict[str, int]) -> dict[str, dict[str, int]]:
    """Node placements for GPU ``counts`` as the Pollux study's Optimus and
    Tiresias place them: a job whose count is unchanged keeps its nodes; the
    others, smallest first, take GPUs from the node with the most free GPUs,
    again and again (so a job may spread over nodes). Always succeeds."""
    left = dict(free)
    out: dict[str, dict[str, int]] = {}
    by_id = {v.id: v for v in views}
    for jid, g in counts.items():
        cur = by_id[jid].current
        if g and sum(cur.values()) == g and all(left.get(n, 0) >= k for n, k in cur.items()):
            out[jid] = dict(cur)
            for n, k in cur.items():
                left[n] -= k
    for jid in sorted((j for j, g in counts.items() if g and j not in out), key=lambda j: (counts[j], j)):
        need, place = counts[jid], {}
        while need:
            node = max(sorted(left), key=lambda n: left[n])
            if left[node] == 0:
                raise ValueError(f"cannot place {counts[jid]} GPUs for {jid}: counts exceed the free GPUs")
            k = min(need, left[node])
            place[node] = place.get(node, 0) + k
            left[node] -= k
            need -= k
        out[jid] = place
    return out


def to_decisions(views: list[AdaptiveView], placements: dict[str, dict[str, int]], why: str) -> list[Decision]:
    """Decisions that move every job in ``views`` to ``placements`` (job id ->
    GPUs per node; missing or empty: no GPUs). Preemptions come first, so
    the GPUs they free are there for the starts."""
    stops: list[Decision] = []
    moves: list[Decision] = []
    for v in views:
        new = {n: g for n, g in placements.get(v.id, {}).items() if g}
        if new == v.current:
            if not new:
                moves.append(Pend(v.id, Reason.RESOURCES, f"{why}: no GPUs this round"))
            continue
        if not new:
            stops.append(Preempt(v.id, None, Reason.PREEMPTED_FOR_PRIORITY, f"{why}: its GPUs go to other jobs"))
        elif v.current:
            moves.append(Reconfigure(v.id, Placement.of(new), v.spec.plan, message=f"{why}: {sum(new.values())} GPUs"))
        else:
            moves.append(Start(v.id, Placement.of(new), message=f"{why}: {sum(new.values())} GPUs"))
    return stops + moves


def plain_starts(snapshot: Snapshot, placements: dict[str, dict[str, int]]) -> list[Decision]:
    """Starts for pending jobs that are not adaptive, by priority then arrival, in
    the GPUs left by the running plain jobs and the adaptive ``placements``."""
    plain = by_priority([p for p in snapshot.pending if p.spec.adaptive is None and p.hold_reason is None],
                        uniform=False)
    if not plain:
        return []
    free = free_from_running(snapshot.nodes, [r for r in snapshot.running if r.spec.adaptive is None])
    room = FreeCapacity({n: (g - sum(p.get(n, 0) for p in placements.values()), c, m)
                         for n, (g, c, m) in free.items()})
    starts: list[Decision] = []
    for p in plain:
        where = room.place(p.spec)
        if where is not None:
            room.take(p.spec, where)
            starts.append(Start(p.spec.id, where))
    return starts


__all__ = ["AdaptiveView", "adaptive_jobs", "capacity", "pack", "plain_starts", "spread", "to_decisions"]

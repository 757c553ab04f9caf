"""Small policies for testing the simulator independently of the real ones.

They follow the policy contract (pure, deterministic, jointly feasible
decisions) with the simplest possible logic, so simulator tests can predict
every start and preemption by hand.
"""

from __future__ import annotations

from scheduler.core.decisions import Decision, Pend, Preempt, Reason, Start
from scheduler.core.model import JobClass, Placement, Snapshot


def _free(snapshot: Snapshot) -> dict[str, int]:
    free = {n.name: n.gpus for n in snapshot.nodes}
    for r in snapshot.running:
        for name, g in r.placement.parts:
            free[name] -= g
    return free


def _first_fit(free: dict[str, int], gpus: int) -> Placement | None:
    """One node if any fits, else nodes in name order, all or nothing."""
    for name in sorted(free):
        if free[name] >= gpus:
            return Placement(((name, gpus),))
    if sum(free.values()) < gpus:
        return None
    parts, need = {}, gpus
    for name in sorted(free):
        take = min(free[name], need)
        if take:
            parts[name] = take
            need -= take
        if need == 0:
            break
    return Placement.of(parts)


class GreedyFifo:
    """Arrival order, non-blocking, first fit; never preempts."""

    name = "toy-greedy"

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        free = _free(snapshot)
        out: list[Decision] = []
        for p in snapshot.pending:
            placement = _first_fit(free, p.spec.num_gpus)
            if placement is None:
                out.append(Pend(p.spec.id, Reason.RESOURCES))
                continue
            for name, g in placement.parts:
                free[name] -= g
            out.append(Start(p.spec.id, placement))
        return out


class PreemptOldestForTE:
    """TE first; a TE job that does not fit preempts BE jobs (oldest attempt
    first, at most ``max_preemptions`` each) until it would fit, then waits."""

    name = "toy-preempt"

    def __init__(self, max_preemptions: int = 1) -> None:
        self.max_preemptions = max_preemptions

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        free = _free(snapshot)
        out: list[Decision] = []
        vacating = sum(r.spec.num_gpus for r in snapshot.running if r.preempting)
        te = [p for p in snapshot.pending if p.spec.job_class is JobClass.TE]
        be = [p for p in snapshot.pending if p.spec.job_class is JobClass.BE]
        victims_taken: set[str] = set()
        for p in te:
            placement = _first_fit(free, p.spec.num_gpus)
            if placement is not None:
                for name, g in placement.parts:
                    free[name] -= g
                out.append(Start(p.spec.id, placement))
                continue
            need = p.spec.num_gpus - sum(free.values()) - vacating
            candidates = sorted(
                (r for r in snapshot.running
                 if r.spec.job_class is JobClass.BE and not r.preempting
                 and r.preemptions < self.max_preemptions and r.spec.id not in victims_taken),
                key=lambda r: (r.attempt_start, r.spec.id),
            )
            for r in candidates:
                if need <= 0:
                    break
                victims_taken.add(r.spec.id)
                out.append(Preempt(r.spec.id, for_job=p.spec.id))
                need -= r.spec.num_gpus
            vacating = max(0, vacating - p.spec.num_gpus)
            out.append(Pend(p.spec.id, Reason.WAITING_FOR_PREEMPTION))
        for p in be:
            placement = _first_fit(free, p.spec.num_gpus)
            if placement is None:
                out.append(Pend(p.spec.id, Reason.RESOURCES))
                continue
            for name, g in placement.parts:
                free[name] -= g
            out.append(Start(p.spec.id, placement))
        return out

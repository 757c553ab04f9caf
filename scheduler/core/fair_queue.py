"""Fair share inside one ``decide`` call: queue order, the TE bound, the heads' reservations.

Active when the snapshot carries ``tenants`` (``scheduler.core.fairshare``);
without it nothing here runs and every policy decides as before.

* **Order.** Jobs that keep their tenant within its entitlement (max-min
  fair part of the cluster given present demand and shares) come first, by
  fair-share factor (Slurm classic ``2^(-U/S)`` on decayed usage, higher
  first); then the jobs beyond, interleaved by the share their tenant would
  reach (``FairView.order``). Within a tenant: priority (higher first), then
  the user's decayed usage (less first), then arrival.
* **TE bound.** TE jobs keep their privilege (ahead of BE, preemption) only
  while their tenant's TE GPUs (running plus started this cycle) stay within
  its entitlement; the rest queue as BE in fair order. A flood of TE jobs
  from one tenant cannot take the cluster.
* **The heads' reservations.** The first job of each tenant's queue (in fair
  order) that keeps its tenant within its entitlement, or takes it from far
  below its entitlement beyond it but closer (``FairView.overshoots_closer``),
  gets an anti-starvation reservation when it does not fit
  (``FairView.heads_due``), one per tenant, ahead of the oldest job:
  otherwise small jobs of borrowing tenants refill every GPU that frees up
  and a large job of a tenant below its part waits for hours, while the
  oldest job, under a flood, is usually the flooding tenant's. A single
  reservation (the first head's only) left every other tenant below its part
  exposed in the same way.
* **Reclaim** (``scheduler.core.fair_reclaim``): a tenant well below its
  entitlement takes GPUs back from borrowing tenants by preemption.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from scheduler.core.decisions import Decision, Pend
from scheduler.core.fairshare import DEFAULT_SHARE, TenantUsage, factors, water_fill
from scheduler.core.model import JobClass, PendingJob, Snapshot

EPS = 1e-9
"""Slack of the GPU-count comparisons (entitlements are fractional)."""

RECLAIM_BELOW = 0.8
"""Part of its entitlement a tenant holds at most before it reclaims, or before a
job that overshoots its part may be served first. 0.8, measured (docs/results.md,
fair share, second pass): on the synthetic workload, four seeds, it cut reclaim
preemptions by a third at the same attainment."""


def standing(total_gpus: float, held: Mapping[str, float], wanted: Mapping[str, float],
             tenants: Mapping[str, TenantUsage]) -> tuple[dict[str, TenantUsage], dict[str, float], dict[str, float]]:
    """``(tenants, factor, entitled)``: every tenant (those that hold or want GPUs and are not in
    ``tenants`` added with the default share and no usage), its fair-share factor, and its
    entitlement, the max-min fair part of ``total_gpus`` given what each wants (``wanted``: GPUs it
    holds and is not giving back, plus those its eligible pending jobs ask for) and the shares."""
    known = dict(tenants)
    for t in set(wanted) | set(held):
        if t not in known:
            known[t] = TenantUsage(DEFAULT_SHARE)
    entitled = water_fill(total_gpus, {t: wanted.get(t, 0.0) for t in known}, {t: u.share for t, u in known.items()})
    return known, factors(known), entitled


class FairView:
    """The tenants' standing at the start of one cycle."""

    __slots__ = ("tenants", "factor", "alloc", "entitled", "te_alloc", "te_over")

    def __init__(self, snapshot: Snapshot, tenants: Mapping[str, TenantUsage]) -> None:
        alloc: dict[str, float] = {}
        demand: dict[str, float] = {}
        te_alloc: dict[str, float] = {}
        for r in snapshot.running:
            t, g = r.spec.tenant, r.spec.num_gpus
            alloc[t] = alloc.get(t, 0.0) + g
            if not r.preempting:
                demand[t] = demand.get(t, 0.0) + g
                if r.spec.job_class is JobClass.TE:
                    te_alloc[t] = te_alloc.get(t, 0.0) + g
        for p in snapshot.pending:
            t = p.spec.tenant
            demand[t] = demand.get(t, 0.0) + (p.spec.num_gpus if p.hold_reason is None else 0.0)
        self.tenants, self.factor, self.entitled = standing(sum(n.gpus for n in snapshot.nodes), alloc, demand, tenants)
        self.alloc = alloc
        self.te_alloc = te_alloc
        self.te_over: list[PendingJob] = []

    def below(self, tenant: str, extra: float = 0.0) -> bool:
        """True when the tenant, holding ``extra`` more GPUs, stays within its entitlement."""
        return self.alloc.get(tenant, 0.0) + extra <= self.entitled.get(tenant, 0.0) + EPS

    def level(self, tenant: str) -> float:
        """GPUs the tenant holds per unit of share: equal levels are a fair split."""
        return self.alloc.get(tenant, 0.0) / self.tenants[tenant].share

    def far_below(self, tenant: str) -> bool:
        """True when the tenant holds at most ``RECLAIM_BELOW`` of its (non-zero) entitlement."""
        entitled = self.entitled.get(tenant, 0.0)
        return entitled > 0 and self.alloc.get(tenant, 0.0) <= RECLAIM_BELOW * entitled + EPS

    def overshoots_closer(self, job: PendingJob) -> bool:
        """True when the job takes its tenant, now far below its entitlement,
        beyond it, yet closer to it than it is (``held + gpus/2 < entitlement``)."""
        t, g = job.spec.tenant, job.spec.num_gpus
        return (self.far_below(t) and not self.below(t, g)
                and self.alloc.get(t, 0.0) + g / 2 < self.entitled.get(t, 0.0) - EPS)

    def due(self, job: PendingJob) -> bool:
        """True when the job keeps its tenant within its entitlement or overshoots it closer."""
        return self.below(job.spec.tenant, job.spec.num_gpus) or self.overshoots_closer(job)

    def heads_due(self, queue: Sequence[PendingJob], skip: set[str] | None) -> list[PendingJob]:
        """Each tenant's first eligible job of ``queue`` (fair order) that is
        ``due``, in queue order (module doc: the heads' reservations)."""
        heads: list[PendingJob] = []
        seen: set[str] = set()
        waiting = len(self.tenants)
        for job in queue:
            if job.hold_reason is not None or (skip is not None and job.spec.id in skip):
                continue
            t = job.spec.tenant
            if t in seen:
                continue
            seen.add(t)
            if self.due(job):
                heads.append(job)
            if len(seen) == waiting:
                break
        return heads

    def order(self, jobs: Sequence[PendingJob]) -> list[PendingJob]:
        """``jobs`` (arrival order) in fair order (module doc).

        Each tenant's jobs are first put in its own order (priority, user
        usage, arrival); walking that order, a job whose GPUs, added to what
        the tenant holds and to the jobs before it, stay within the
        entitlement is *within*, the rest *beyond*. Within jobs come first,
        by fair-share factor; beyond jobs follow, interleaved by the share
        their tenant would reach with them (GPUs over share, lowest first),
        so idle GPUs are lent evenly rather than to one tenant."""
        factor, tenants, entitled = self.factor, self.tenants, self.entitled
        own: dict[str, list[PendingJob]] = {}
        for p in jobs:
            own.setdefault(p.spec.tenant, []).append(p)
        split: dict[str, int] = {}
        for t, queue in own.items():
            users = tenants[t].users
            if len(queue) > 1:
                queue.sort(key=lambda p: (-p.spec.priority, users.get(p.spec.user, 0.0)))
            held = self.alloc.get(t, 0.0)
            limit = entitled.get(t, 0.0) + EPS
            i = 0
            for p in queue:  # the within jobs are a prefix of the tenant's queue
                held += p.spec.num_gpus
                if held > limit:
                    break
                i += 1
            split[t] = i
        # Tenants by factor (higher first), then name; each tenant's queue is already in its order, so
        # the fair order is a concatenation, not a sort of every pending job.
        ranked = sorted(own, key=lambda t: (-factor[t], t))
        out = [p for t in ranked for p in own[t][:split[t]]]
        out += [p for t in ranked for p in own[t][split[t]:]]
        return out

    def bound_te(self, te: Sequence[PendingJob]) -> tuple[list[PendingJob], list[PendingJob]]:
        """``(kept, over)``: TE jobs within their tenant's entitlement, in
        order, and those beyond it (they queue as BE this cycle; kept as
        ``te_over`` for ``tell_te_over``)."""
        used = dict(self.te_alloc)
        kept: list[PendingJob] = []
        over: list[PendingJob] = []
        for job in te:
            t, g = job.spec.tenant, job.spec.num_gpus
            if job.hold_reason is not None:
                kept.append(job)
            elif used.get(t, 0.0) + g <= self.entitled.get(t, 0.0) + EPS:
                used[t] = used.get(t, 0.0) + g
                kept.append(job)
            else:
                over.append(job)
        self.te_over = over
        return kept, over

    def tell_te_over(self, out: list[Decision]) -> None:
        """Add to the Pend of each TE job ``bound_te`` queued as BE why it lost the TE queue's
        privileges (going ahead of BE jobs, preempting them): without it the job reads like any
        job waiting for GPUs, and its owner cannot tell why it neither starts nor preempts."""
        over = {p.spec.id: p.spec.tenant for p in self.te_over}
        for i, d in enumerate(out):
            if d.__class__ is Pend and d.job_id in over:
                t = over[d.job_id]
                out[i] = replace(d, message=(
                    f"{d.message}; queued as BE by fair share: TE jobs of project {t or '(none)'} hold "
                    f"{self.te_alloc.get(t, 0.0):g} GPUs of its entitlement of {self.entitled.get(t, 0.0):.3g}"))

"""Per-tenant results of a run and how fairly the cluster was shared.

``tenant_summary``: per tenant, its configured share, GPU-seconds held, jobs,
TE p95 and BE median slowdown.

``attainment``: the run is cut into windows (default 6 h). In each window a
tenant's *demand* is the GPU-seconds its jobs asked for while present
(submitted and not completed: requested GPUs x time in the window); its
*entitlement* is its max-min fair (water-filling) part of the cluster's
GPU-seconds in the window given every tenant's demand and share
(``scheduler.core.fairshare.water_fill``); what it *got* is the GPU-seconds
its attempts held in the window. A tenant is *backlogged* in a window when
one of its jobs waited (pending) at some moment of it. Attainment of a
backlogged tenant in a window = got / entitlement, capped at 1; reported as
p10 and median over all (tenant, window) pairs with an entitlement > 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from scheduler.core.fairshare import DEFAULT_SHARE, water_fill
from scheduler.core.metrics import JobOutcome, percentile
from scheduler.core.model import JobClass, JobSpec

DEFAULT_WINDOW = 6 * 3600.0

Interval = tuple[float, float]


def tenant_summary(specs: Mapping[str, JobSpec], outcomes: Sequence[JobOutcome],
                   held: Mapping[str, float], shares: Mapping[str, float]) -> dict[str, dict]:
    """``{tenant: {configured_share, gpu_seconds, jobs, te_p95_slowdown,
    be_median_slowdown}}``; ``held`` is GPU-seconds held per job id."""
    by_tenant: dict[str, list[JobOutcome]] = defaultdict(list)
    for o in outcomes:
        by_tenant[specs[o.job_id].tenant].append(o)
    out = {}
    for tenant in sorted(by_tenant):
        jobs = by_tenant[tenant]
        te = sorted(o.slowdown for o in jobs if o.job_class is JobClass.TE)
        be = sorted(o.slowdown for o in jobs if o.job_class is JobClass.BE)
        out[tenant] = {
            "configured_share": shares.get(tenant, DEFAULT_SHARE),
            "gpu_seconds": sum(held.get(o.job_id, 0.0) for o in jobs),
            "jobs": len(jobs),
            "te_p95_slowdown": percentile(te, 95),
            "be_median_slowdown": percentile(be, 50),
        }
    return out


def _spread(intervals: Iterable[tuple[str, float, Interval]], origin: float, width: float,
            into: dict[int, dict[str, float]]) -> None:
    """Add ``weight x overlap`` of each (tenant, weight, interval) to its windows."""
    for tenant, weight, (a, b) in intervals:
        if b <= a:
            continue
        first, last = int((a - origin) // width), int((b - origin) // width)
        for w in range(first, last + 1):
            lo, hi = max(a, origin + w * width), min(b, origin + (w + 1) * width)
            if hi > lo:
                row = into.setdefault(w, {})
                row[tenant] = row.get(tenant, 0.0) + weight * (hi - lo)


def attainment(specs: Mapping[str, JobSpec], outcomes: Sequence[JobOutcome],
               attempts: Mapping[str, Sequence[tuple[int, Interval]]], total_gpus: int,
               shares: Mapping[str, float], window: float = DEFAULT_WINDOW) -> dict:
    """``{window_seconds, tenant_windows, attainment: {p10, median}}`` (module
    doc). ``attempts``: per job id, its attempts as (GPUs, (start, end)) in
    time order."""
    if not (window > 0 and math.isfinite(window)):
        raise ValueError(f"window must be a finite number of seconds > 0, got {window!r}")
    if not outcomes:
        return {"window_seconds": window, "tenant_windows": 0, "attainment": {"p10": None, "median": None}}
    origin = min(o.submit_time for o in outcomes)
    end = max(o.completion for o in outcomes)
    demand: dict[int, dict[str, float]] = {}
    got: dict[int, dict[str, float]] = {}
    waiting: dict[int, set[str]] = defaultdict(set)
    for o in outcomes:
        tenant = specs[o.job_id].tenant
        _spread([(tenant, o.num_gpus, (o.submit_time, o.completion))], origin, window, demand)
        runs = attempts.get(o.job_id, ())
        _spread([(tenant, g, span) for g, span in runs], origin, window, got)
        # Pending from submission to the first start, and between attempts.
        t = o.submit_time
        for _, (start, stop) in runs:
            if start > t:
                for w in range(int((t - origin) // window), int((start - origin) // window) + 1):
                    if origin + w * window < start and origin + (w + 1) * window > t:
                        waiting[w].add(tenant)
            t = stop
    values = []
    for w in range(int((end - origin) // window) + 1):
        span = min(window, end - (origin + w * window))
        if span <= 0 or not waiting.get(w):
            continue
        wanted = demand.get(w, {})
        share = {t: shares.get(t, DEFAULT_SHARE) for t in wanted}
        entitled = water_fill(total_gpus * span, wanted, share)
        for tenant in sorted(waiting[w]):
            e = entitled.get(tenant, 0.0)
            if e > 0:
                values.append(min(1.0, got.get(w, {}).get(tenant, 0.0) / e))
    values.sort()
    return {
        "window_seconds": window,
        "tenant_windows": len(values),
        "attainment": {"p10": percentile(values, 10), "median": percentile(values, 50)},
    }


def run_fairness(workload, sim, shares: Mapping[str, float] | None, window: float = DEFAULT_WINDOW) -> dict:
    """The ``tenants`` and ``fair_share`` objects of one run's JSON; needs the
    run's attempt log (``SimConfig.record_attempts``). ``shares`` None (fair
    share off): every tenant counts with the default share."""
    specs = {j.spec.id: j.spec for j in workload.jobs}
    shares = dict(shares or {})
    runs: dict[str, list[tuple[int, Interval]]] = defaultdict(list)
    held: dict[str, float] = defaultdict(float)
    for a in sim.attempts or ():
        g = a.placement.num_gpus
        runs[a.job_id].append((g, (a.start, a.end)))
        held[a.job_id] += g * (a.end - a.start)
    for lst in runs.values():
        lst.sort(key=lambda x: x[1])
    return {
        "tenants": tenant_summary(specs, sim.outcomes, held, shares),
        "fair_share": attainment(specs, sim.outcomes, runs, sim.total_gpus, shares, window),
    }

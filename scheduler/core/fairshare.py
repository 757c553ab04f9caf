"""Fair share among tenants: the state a caller keeps, and the arithmetic.

A *tenant* is a project (account); its jobs carry it in ``JobSpec.tenant``.
Each tenant has a configured ``share`` (any positive weight) and a *usage*:
GPU-seconds, each decayed by half every ``half_life`` seconds, so that what a
tenant ran a week ago weighs little against what it ran an hour ago. The caller
keeps the usage (the simulator on its virtual clock with ``UsageLedger``; the
live loop from its attempts) and hands it to the policies as
``Snapshot.tenants``; policies never keep state.

Two numbers come out of it (docs/policies.md explains the choice):

* the **fair-share factor** of a tenant, Slurm's classic ``2^(-U/S)``, where
  ``U`` is the tenant's part of all tenants' decayed usage and ``S`` its part
  of all shares: 1 for a tenant that used nothing, 0.5 for one that used
  exactly its share, towards 0 the more it used beyond. It orders the BE queue.
* the **entitlement** of a tenant now: its max-min fair (water-filling) part
  of the cluster's GPUs given every tenant's present demand (GPUs of its
  running and pending jobs) and share. A tenant holding more than its
  entitlement is *borrowing*; a tenant below it may reclaim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

DEFAULT_SHARE = 1.0
"""Share of a tenant the caller did not configure: equal shares by default."""

DEFAULT_HALF_LIFE = 3600.0
"""Seconds after which usage counts half. One hour, measured (docs/results.md,
fair share): on the synthetic workload the p10 attainment over 6-hour
windows is 0.887 with 1 h, 0.871 with 6 h and 0.820 with 24 h; a long memory
holds back a tenant for a burst that is already paid for within the window
by which fairness is judged."""


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """One tenant as the policies see it: configured ``share`` (> 0), decayed
    ``usage`` in GPU-seconds, and decayed usage per user of the tenant
    (users share their tenant equally; a user missing has used nothing)."""

    share: float = DEFAULT_SHARE
    usage: float = 0.0
    users: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.share, (int, float)) and math.isfinite(self.share) and self.share > 0):
            raise ValueError(f"share must be a finite number > 0, got {self.share!r}")
        if not (math.isfinite(self.usage) and self.usage >= 0):
            raise ValueError(f"usage must be a finite number >= 0, got {self.usage!r}")


def decay(usage: float, elapsed: float, half_life: float) -> float:
    """``usage`` after ``elapsed`` seconds of decay."""
    return usage * 2.0 ** (-elapsed / half_life) if elapsed > 0 else usage


def accrue(usage: float, gpus: float, elapsed: float, half_life: float) -> float:
    """Usage after ``elapsed`` seconds holding ``gpus`` GPUs: the old usage
    decays, and each GPU-second held is added decayed from when it was used
    (the exact integral, so the result does not depend on how often the
    caller updates)."""
    if elapsed <= 0:
        return usage
    keep = 2.0 ** (-elapsed / half_life)
    return usage * keep + gpus * (half_life / math.log(2.0)) * (1.0 - keep)


def factors(tenants: Mapping[str, TenantUsage]) -> dict[str, float]:
    """Slurm's classic fair-share factor ``2^(-U/S)`` of every tenant, with
    ``U`` and ``S`` normalized over all tenants given."""
    total_share = sum(t.share for t in tenants.values())
    total_usage = sum(t.usage for t in tenants.values())
    out = {}
    for name, t in tenants.items():
        u = t.usage / total_usage if total_usage > 0 else 0.0
        out[name] = 2.0 ** (-u / (t.share / total_share))
    return out


def water_fill(capacity: float, demands: Mapping[str, float], shares: Mapping[str, float]) -> dict[str, float]:
    """Max-min fair split of ``capacity`` by weight: every tenant gets
    ``min(demand, level * share)`` with one ``level`` for all, the largest
    for which the parts fit in ``capacity``. A tenant whose demand is met
    leaves the rest to the others. Tenants without demand get 0."""
    out = {name: 0.0 for name in demands}
    active = sorted((d / shares[name], name) for name, d in demands.items() if d > 0)
    left = float(capacity)
    weight = sum(shares[name] for _, name in active)
    for i, (ratio, name) in enumerate(active):
        level = left / weight if weight > 0 else 0.0
        if ratio <= level:
            out[name] = demands[name]
            left -= demands[name]
            weight -= shares[name]
            continue
        for _, rest in active[i:]:
            out[rest] = level * shares[rest]
        break
    return out


class UsageLedger:
    """Decayed usage per tenant and user, kept by a caller with a clock (the
    simulator): report allocation changes with ``add``, read the state for
    ``Snapshot.tenants`` with ``state(now)``."""

    def __init__(self, shares: Mapping[str, float], half_life: float = DEFAULT_HALF_LIFE) -> None:
        if not (half_life > 0 and math.isfinite(half_life)):
            raise ValueError(f"half_life must be a finite number > 0, got {half_life!r}")
        self.shares = {name: float(s) for name, s in shares.items()}
        for name, s in self.shares.items():
            TenantUsage(share=s)  # validates
        self.half_life = half_life
        self._time = 0.0
        self._held: dict[tuple[str, str], float] = {}
        self._usage: dict[tuple[str, str], float] = {}

    def add(self, tenant: str, user: str, gpus: float, now: float) -> None:
        """``gpus`` more (negative: fewer) GPUs held by ``user`` of ``tenant`` from ``now``."""
        self._advance(now)
        key = (tenant, user)
        self._held[key] = self._held.get(key, 0.0) + gpus

    def state(self, now: float) -> dict[str, TenantUsage]:
        """Every tenant with a share or a usage, as of ``now``."""
        self._advance(now)
        usage: dict[str, float] = {}
        users: dict[str, dict[str, float]] = {}
        for (tenant, user), u in self._usage.items():
            usage[tenant] = usage.get(tenant, 0.0) + u
            users.setdefault(tenant, {})[user] = u
        names = set(self.shares) | set(usage)
        return {
            name: TenantUsage(self.shares.get(name, DEFAULT_SHARE), usage.get(name, 0.0), users.get(name, {}))
            for name in names
        }

    def _advance(self, now: float) -> None:
        elapsed = now - self._time
        if elapsed <= 0:
            return
        h = self.half_life
        for key in set(self._usage) | set(self._held):
            self._usage[key] = accrue(self._usage.get(key, 0.0), self._held.get(key, 0.0), elapsed, h)
        self._time = now

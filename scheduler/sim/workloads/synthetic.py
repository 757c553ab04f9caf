"""Seeded synthetic workload in the paper's setting.

Yabuuchi et al. (OpML 2019) describe two kinds of jobs sharing a GPU cluster:
trial-and-error (TE) jobs are short and small (a person launches them and
watches), best-effort (BE) jobs are long, larger trainings that can checkpoint
within a grace period. Every number below is a named, documented parameter of
:class:`SyntheticConfig`; ``docs/simulator.md`` explains the choices.

Offered load is exact for the sample: the mean arrival rate is set so that the
GPU-seconds the jobs ask for, divided by the cluster's GPUs, equal ``load`` times
the expected arrival span. Arrivals follow a day/night cycle (a sinusoidal rate,
lowest at t = 0, highest half a period later), drawn by thinning a Poisson
process. Job sizes and durations come from a generator seeded independently of
the arrival times, so changing ``load`` changes when jobs arrive, not which jobs.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from scheduler.core.model import JobClass, JobSpec
from scheduler.sim.workloads.grace import GRACE_CHOICES, draw_grace
from scheduler.sim.workloads.types import SimJob, Workload

# (GPUs, weight) pairs.
TE_GPUS: tuple[tuple[int, float], ...] = ((1, 0.7), (2, 0.2), (4, 0.1))
BE_GPUS: tuple[tuple[int, float], ...] = ((1, 0.3), (2, 0.2), (4, 0.25), (8, 0.2), (16, 0.05))


@dataclass(frozen=True)
class SyntheticConfig:
    """Parameters of the synthetic workload (defaults: the documented setting).

    Durations are log-normal with the given median and sigma (of the log),
    clipped to ``[min, max]`` seconds. GPU counts are drawn from the weighted
    tables; sizes larger than the cluster are dropped from the tables.
    """

    seed: int = 0
    jobs: int = 4000
    nodes: int = 16
    gpus_per_node: int = 8
    load: float = 1.0
    te_share: float = 0.3
    diurnal_amplitude: float = 0.5
    diurnal_period: float = 86400.0
    te_gpus: tuple[tuple[int, float], ...] = TE_GPUS
    te_duration_median: float = 600.0
    te_duration_sigma: float = 1.0
    te_duration_min: float = 60.0
    te_duration_max: float = 7200.0
    be_gpus: tuple[tuple[int, float], ...] = BE_GPUS
    be_duration_median: float = 14400.0
    be_duration_sigma: float = 1.2
    be_duration_min: float = 600.0
    be_duration_max: float = 259200.0
    grace_choices: tuple[float, ...] = field(default=GRACE_CHOICES)
    tenants: int = 4
    """Tenants ``t0``.. the jobs are spread over (uniformly, from a generator
    of their own, so the jobs themselves do not change), each with
    ``users_per_tenant`` users ``t0-u0``..."""
    users_per_tenant: int = 3
    flood: tuple[str, float] | None = None
    """``(tenant, factor)``: that tenant submits ``factor`` times its normal
    number of jobs; the extra jobs are drawn from the same distributions and
    arrive at the tenant's own arrival instants (plus up to ten minutes), so
    the offered load grows by what the flood adds."""

    def __post_init__(self) -> None:
        _check(self.jobs >= 1, "jobs", f"must be >= 1, got {self.jobs}")
        _check(self.nodes >= 1 and self.gpus_per_node >= 1, "cluster", "needs at least one node with one GPU")
        _check(math.isfinite(self.load) and self.load > 0, "load", f"must be > 0, got {self.load}")
        _check(0.0 <= self.te_share <= 1.0, "te_share", f"must be in [0, 1], got {self.te_share}")
        _check(0.0 <= self.diurnal_amplitude < 1.0, "diurnal_amplitude", "must be in [0, 1)")
        _check(self.diurnal_period > 0, "diurnal_period", "must be > 0")
        _check(len(self.grace_choices) > 0, "grace_choices", "must not be empty")
        _check(self.tenants >= 1 and self.users_per_tenant >= 1, "tenants", "need at least one tenant and user")
        if self.flood is not None:
            tenant, factor = self.flood
            names = {f"t{k}" for k in range(self.tenants)}
            _check(tenant in names, "flood", f"tenant {tenant!r} is not one of t0..t{self.tenants - 1}")
            _check(math.isfinite(factor) and factor >= 1, "flood", f"factor must be >= 1, got {factor!r}")
        for name in ("te", "be"):
            lo, hi = getattr(self, f"{name}_duration_min"), getattr(self, f"{name}_duration_max")
            _check(0 < lo <= hi, f"{name}_duration_min", "need 0 < min <= max")

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        text = (
            f"synthetic seed={self.seed} jobs={self.jobs} cluster={self.nodes}x{self.gpus_per_node} "
            f"load={self.load:g} te_share={self.te_share:g} diurnal={self.diurnal_amplitude:g}"
        )
        if self.flood is not None:
            text += f" flood={self.flood[0]}:{self.flood[1]:g}"
        return text


def generate(config: SyntheticConfig) -> Workload:
    """The workload for ``config``; the same config always gives the same jobs."""
    rng = random.Random(f"synthetic-jobs-{config.seed}")
    te_gpus = _fitting(config.te_gpus, config.total_gpus)
    be_gpus = _fitting(config.be_gpus, config.total_gpus)
    width = len(str(config.jobs - 1))
    drafts = [_draft(rng, config, te_gpus, be_gpus, f"j{i:0{width}d}") for i in range(config.jobs)]
    work = sum(gpus * duration for _, _, gpus, duration, _ in drafts)
    rate = config.load * config.total_gpus * config.jobs / work  # jobs per second
    times = _arrivals(random.Random(f"synthetic-arrivals-{config.seed}"), config.jobs, rate,
                      config.diurnal_amplitude, config.diurnal_period)
    owners = random.Random(f"synthetic-tenants-{config.seed}")
    jobs = []
    for (jid, cls, g, d, grace), t in zip(drafts, times):
        k = owners.randrange(config.tenants)
        user = f"t{k}-u{owners.randrange(config.users_per_tenant)}"
        spec = JobSpec(id=jid, job_class=cls, num_gpus=g, submit_time=t, grace_period=grace, tenant=f"t{k}", user=user)
        jobs.append(SimJob(spec, duration=d))
    if config.flood is not None:
        jobs = sorted(jobs + _flood(config, jobs, te_gpus, be_gpus), key=lambda j: (j.spec.submit_time, j.spec.id))
    return Workload(name=config.describe(), jobs=jobs)


def _draft(rng: random.Random, config: SyntheticConfig, te_gpus, be_gpus, jid: str) -> tuple:
    """(id, class, GPUs, duration, grace) of one job."""
    te = rng.random() < config.te_share
    if te:
        gpus = _weighted(rng, te_gpus)
        duration = _lognormal(rng, config.te_duration_median, config.te_duration_sigma,
                              config.te_duration_min, config.te_duration_max)
    else:
        gpus = _weighted(rng, be_gpus)
        duration = _lognormal(rng, config.be_duration_median, config.be_duration_sigma,
                              config.be_duration_min, config.be_duration_max)
    grace = draw_grace(rng, config.grace_choices)
    return (jid, JobClass.TE if te else JobClass.BE, gpus, duration, grace)


def _flood(config: SyntheticConfig, jobs: list[SimJob], te_gpus, be_gpus) -> list[SimJob]:
    """The flooding tenant's extra jobs (``SyntheticConfig.flood``)."""
    tenant, factor = config.flood  # type: ignore[misc]
    own = [j.spec for j in jobs if j.spec.tenant == tenant]
    extra = round((factor - 1.0) * len(own))
    if not own or extra <= 0:
        return []
    rng = random.Random(f"synthetic-flood-{config.seed}")
    out = []
    for i in range(extra):
        jid, cls, g, d, grace = _draft(rng, config, te_gpus, be_gpus, f"f{i:0{len(str(extra - 1))}d}")
        base = own[rng.randrange(len(own))]
        t = round(base.submit_time + rng.uniform(0.0, 600.0), 3)
        spec = JobSpec(id=jid, job_class=cls, num_gpus=g, submit_time=t, grace_period=grace, tenant=tenant,
                       user=base.user)
        out.append(SimJob(spec, duration=d))
    return out


def _check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ValueError(f"synthetic workload: {name} {message}")


def _fitting(table: tuple[tuple[int, float], ...], total_gpus: int) -> tuple[tuple[int, float], ...]:
    kept = tuple((g, w) for g, w in table if g <= total_gpus and w > 0)
    if not kept:
        raise ValueError(f"synthetic workload: no job size in {table} fits a {total_gpus}-GPU cluster")
    return kept


def _weighted(rng: random.Random, table: tuple[tuple[int, float], ...]) -> int:
    x = rng.random() * sum(w for _, w in table)
    for value, weight in table:
        x -= weight
        if x < 0:
            return value
    return table[-1][0]


def _lognormal(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, round(median * math.exp(sigma * rng.gauss(0.0, 1.0)))))


def _arrivals(rng: random.Random, n: int, rate: float, amplitude: float, period: float) -> list[float]:
    """``n`` arrival times of a Poisson process whose rate follows a day/night cycle.

    Rate(t) = rate * (1 - amplitude * cos(2 pi t / period)); its mean over a
    period is ``rate``. Thinning: candidates at the peak rate, each kept with
    probability Rate(t) / peak.
    """
    peak = rate * (1.0 + amplitude)
    omega = 2.0 * math.pi / period
    times: list[float] = []
    t = 0.0
    while len(times) < n:
        t += rng.expovariate(peak)
        if rng.random() * (1.0 + amplitude) < 1.0 - amplitude * math.cos(omega * t):
            times.append(round(t, 3))
    return times

"""What preemption planning works with: victim candidates, jobs already
vacating, the running set indexed for one cycle, one node as a TE job sees it,
what a TE job needs, and the plan that gets it there.

The planner (``scheduler.core.victim_planner``) builds plans from these; the
choosers (``scheduler.core.victim_choosers``) pick among the candidates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from scheduler.core.model import JobClass, PendingJob, RunningJob
from scheduler.core.placement import units_of


@dataclass(slots=True)
class Candidate:
    """A running job that may be preempted, with what it frees per node."""

    job: RunningJob
    id: str
    gpus: int
    grace: float
    preemptions: int
    start: float
    demoted_te: bool
    parts: dict[str, tuple[int, float, float]]


@dataclass(slots=True)
class Vacating:
    """A job that received a preemption notice and still holds resources."""

    job: RunningJob
    id: str
    claimed_by: str | None
    end: float
    parts: dict[str, tuple[int, float, float]]


def _parts(job: RunningJob) -> dict[str, tuple[int, float, float]]:
    spec = job.spec
    g = spec.num_gpus
    parts = job.placement.parts
    if len(parts) == 1:  # most jobs: no comprehension (built for every running job of a large cycle)
        ((n, k),) = parts
        return {n: (k, spec.num_cpus * k / g, spec.mem_gb * k / g)}
    return {n: (k, spec.num_cpus * k / g, spec.mem_gb * k / g) for n, k in parts}


def is_demoted_te(job: RunningJob, now: float, te_time_limit: float) -> bool:
    """A TE job that has run longer than the limit (this attempt, or in total)
    is treated as BE from then on."""
    return max(now - job.attempt_start, job.progress) > te_time_limit


class RunningIndex:
    """Vacating jobs, and victim candidates per node, for one cycle. Built
    only when some TE job does not fit; the candidates (the costlier part) only
    when a TE job cannot be served by resources already vacating."""

    def __init__(self, running: Sequence[RunningJob], now: float, te_time_limit: float, max_preemptions: int) -> None:
        self._running = running
        self._now = now
        self._te_time_limit = te_time_limit
        self._max_preemptions = max_preemptions
        self._by_node: dict[str, list[Candidate]] | None = None
        self.chosen: set[str] = set()  # victims picked in this cycle
        self.consumed: set[tuple[str, str]] = set()  # (vacating job, node) counted by a TE job this cycle
        self.vacating: list[Vacating] = []
        for r in running:
            if r.preempting:
                spec = r.spec
                end = (r.notice_time if r.notice_time is not None else now) + spec.grace_period
                self.vacating.append(Vacating(r, spec.id, r.preempted_for, max(end, now), _parts(r)))

    @property
    def by_node(self) -> dict[str, list[Candidate]]:
        if self._by_node is None:
            by_node: dict[str, list[Candidate]] = {}
            now, limit, cap = self._now, self._te_time_limit, self._max_preemptions
            te = JobClass.TE
            for r in self._running:
                if r.preempting or r.preemptions >= cap:
                    continue
                spec = r.spec
                demoted = spec.job_class is te
                if demoted and not is_demoted_te(r, now, limit):
                    continue
                g = spec.num_gpus
                placed = r.placement.parts
                if len(placed) == 1:  # ``_parts`` written out for the usual one-node job: every running job of a cycle
                    ((name, k),) = placed
                    c = Candidate(r, spec.id, g, spec.grace_period, r.preemptions, r.attempt_start, demoted,
                                  {name: (k, spec.num_cpus * k / g, spec.mem_gb * k / g)})
                    lst = by_node.get(name)
                    if lst is None:
                        by_node[name] = [c]
                    else:
                        lst.append(c)
                    continue
                c = Candidate(r, spec.id, g, spec.grace_period, r.preemptions, r.attempt_start, demoted, _parts(r))
                for name in c.parts:
                    lst = by_node.get(name)
                    if lst is None:
                        by_node[name] = [c]
                    else:
                        lst.append(c)
            self._by_node = by_node
        return self._by_node


@dataclass(slots=True)
class HostView:
    """One node as a possible host of a TE job: what the job can have there without new
    preemptions (free now plus resources being vacated for it), and the
    candidates that could free more. ``shared`` views (no resources vacating
    for this very job) are the same for every TE job and cached per cycle."""

    name: str
    g: int
    c: float
    m: float
    vac: list[Vacating]
    vac_end: float
    mine: int
    cands: list[Candidate]
    shared: bool


Shape = tuple[int, float, float]


@dataclass(slots=True)
class Need:
    """What a TE job needs: ``gpus`` units of ``cpg`` CPUs and ``mpg`` GB each."""

    job: PendingJob
    gpus: int
    cpg: float
    mpg: float
    now: float

    @property
    def shape(self) -> Shape:
        return (self.gpus, self.cpg, self.mpg)

    def units(self, g: int, c: float, m: float) -> int:
        return units_of(g, c, m, self.cpg, self.mpg)


@dataclass(slots=True)
class PreemptionPlan:
    """How a TE job will get its resources: GPUs per node, victims to preempt
    now and vacating jobs it waits for. ``until`` is when the last of them is
    expected to be gone (grace periods are upper bounds)."""

    parts: dict[str, int]
    victims: list[Candidate] = field(default_factory=list)
    waits_on: list[Vacating] = field(default_factory=list)
    until: float = 0.0
    score: float | None = None



__all__ = [
    "Candidate",
    "Need",
    "HostView",
    "PreemptionPlan",
    "RunningIndex",
    "Shape",
    "Vacating",
    "is_demoted_te",
]

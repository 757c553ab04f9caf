"""Iteration times for reconfigurable jobs: measured where measured, modelled elsewhere.

Two layers, both pure (no I/O once built) and memoized:

* ``IterTimes`` answers "seconds per iteration of ``model`` with ``plan`` on
  ``placement`` with ``cpus`` CPU threads". It replays a measured time
  (``placements/<model>.csv``) when that plan and placement were measured and
  falls back to the fitted performance model (``scheduler.core.perf``)
  otherwise, telling the caller which it did. With ``measured={}`` it is the
  model alone; with ``fallback=False``, measurements alone (an unmeasured
  configuration counts as one that cannot run).
* ``PlanThroughput`` is one job's view (``JobSpec.throughput``): the best
  allowed plan per allocation and the reference time of the user's own plan
  on the requested GPUs. Jobs of the same model and plan set share the
  memo, so a policy may ask every cycle.

Conventions, each for a reason:

* Placements are GPUs per node; order does not change a measurement's key
  (the released files list node shares in ascending order, e.g. ``233``), so
  lookups and model queries use the ascending order.
* CPU threads were not recorded with the measurements; the performance
  model's validation takes ZeRO-Offload rows to have had 4 threads per GPU
  process and the others 1. A measured time is scaled by the model's ratio
  between the job's threads and those, so CPUs matter (for ZeRO-Offload, the
  only plan whose modelled time depends on them) in the same way whether the
  time is measured or modelled. For the other plans the ratio is 1.
* A measured (plan, placement) is feasible by definition; an unmeasured one
  must pass the model's feasibility check (3D degrees, GPU memory for model
  states, CPU threads).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from scheduler.core.perf.catalog import spec_for
from scheduler.core.perf.data import PlacementRow
from scheduler.core.perf.plans import Plan, PlanError, parse_plan
from scheduler.core.perf.throughput import ThroughputModel, packed_placement

MEASURED_THREADS = {"zero-offload": 4.0}
"""CPU threads per GPU process the measurements are taken to have had (1 for
plans not listed), as in the performance model's validation."""

Shape = tuple[int, ...]


def canonical(placement: Iterable[int]) -> Shape:
    """GPUs per node in ascending order, nodes with none dropped."""
    return tuple(sorted(int(g) for g in placement if g > 0))


def measured_threads(plan: Plan, gpus: int) -> float:
    """CPU threads the measurement of ``plan`` on ``gpus`` GPUs is taken to have had."""
    return MEASURED_THREADS.get(plan.memory, 1.0) * gpus


@dataclass(frozen=True, slots=True)
class Lookup:
    """One iteration time and where it came from."""

    seconds: float
    measured: bool


class IterTimes:
    """Seconds per iteration: the measurement when there is one, else the model.

    ``measured`` maps a model name to its rows of ``placements/<model>.csv``;
    repeated (plan, placement) rows are averaged. Every answer is memoized.
    """

    def __init__(self, model: ThroughputModel, measured: Mapping[str, Sequence[PlacementRow]] | None = None,
                 fallback: bool = True) -> None:
        self.model = model
        self.fallback = fallback
        sums: dict[tuple[str, str, Shape], list[float]] = defaultdict(list)
        for name, rows in (measured or {}).items():
            key_model = spec_for(name).name
            for r in rows:
                sums[(key_model, r.plan.name, canonical(r.placement))].append(r.iter_s)
        self._table = {k: math.fsum(v) / len(v) for k, v in sums.items()}
        self._memo: dict[tuple, Lookup | None] = {}
        self._best: dict[tuple, tuple[str, float] | None] = {}

    def measured_plans(self, model: str) -> list[str]:
        """Plans with at least one measurement for ``model``, sorted."""
        name = spec_for(model).name
        return sorted({plan for (m, plan, _) in self._table if m == name})

    def lookup(self, model: str, plan: str, placement: Iterable[int], cpus: float | None = None,
               fallback: bool | None = None) -> Lookup | None:
        """The iteration time of ``plan`` on ``placement`` with ``cpus`` threads in all
        (None: the threads of the measurement); None when the plan cannot run
        there. ``fallback`` overrides the instance's choice of using the model
        for unmeasured configurations."""
        shape = canonical(placement)
        use_model = self.fallback if fallback is None else fallback
        key = (model, plan, shape, cpus, use_model)
        if key in self._memo:
            return self._memo[key]
        found = self._compute(model, plan, shape, cpus, use_model)
        self._memo[key] = found
        return found

    def _compute(self, model: str, plan_name: str, shape: Shape, cpus: float | None,
                 use_model: bool) -> Lookup | None:
        try:
            plan = parse_plan(plan_name)
        except PlanError:
            return None
        name = spec_for(model).name
        gpus = sum(shape)
        if not shape or (cpus is not None and cpus < gpus):
            return None
        base_threads = measured_threads(plan, gpus)
        threads = base_threads if cpus is None else float(cpus)
        hit = self._table.get((name, plan.name, shape))
        if hit is not None:
            if threads == base_threads:
                return Lookup(hit, True)
            scale = self.model.iter_time(name, plan, shape, threads) / self.model.iter_time(name, plan, shape, base_threads)
            return Lookup(hit * scale, True)
        if not use_model or self.model.feasible(name, plan, shape, cpus=threads) is not None:
            return None
        return Lookup(self.model.iter_time(name, plan, shape, threads), False)

    def best(self, model: str, plans: tuple[str, ...], placement: Iterable[int],
             cpus: float | None = None) -> tuple[str, float] | None:
        """The fastest of ``plans`` on ``placement`` and its seconds per
        iteration (ties to the name that sorts first); None if none can run."""
        shape = canonical(placement)
        key = (model, plans, shape, cpus)
        if key in self._best:
            return self._best[key]
        choice: tuple[str, float] | None = None
        for plan in sorted(plans):
            found = self.lookup(model, plan, shape, cpus)
            if found is not None and (choice is None or found.seconds < choice[1]):
                choice = (plan, found.seconds)
        self._best[key] = choice
        return choice


@dataclass(frozen=True, slots=True, eq=False)
class PlanThroughput:
    """``JobSpec.throughput`` for a job of a known model (see the module doc).

    ``plans`` are the plans the job may use (the user's included); the
    reference is ``user_plan`` on ``user_gpus`` packed onto nodes of
    ``node_gpus`` with ``user_cpus`` threads (None: the measurement's).
    """

    times: IterTimes
    model: str
    plans: tuple[str, ...]
    user_plan: str
    user_gpus: int
    user_cpus: float | None = None
    node_gpus: int = 8

    def best(self, placement: Sequence[int], cpus: float | None = None) -> tuple[str, float] | None:
        return self.times.best(self.model, self.plans, placement, cpus)

    def time(self, plan: str, placement: Sequence[int], cpus: float | None = None) -> float | None:
        """Seconds per iteration of one plan (None: it cannot run there)."""
        found = self.times.lookup(self.model, plan, placement, cpus)
        return None if found is None else found.seconds

    def reference(self) -> float:
        """Seconds per iteration as requested (from the model when unmeasured,
        whatever the source's ``fallback``: the request is given)."""
        found = self.times.lookup(self.model, self.user_plan, packed_placement(self.user_gpus, self.node_gpus),
                                  self.user_cpus, fallback=True)
        if found is None:
            raise PlanError(
                f"model {self.model}: the user's plan {self.user_plan} cannot run on {self.user_gpus} GPUs"
            )
        return found.seconds

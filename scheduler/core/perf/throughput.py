"""The performance model's API for policies and the simulator.

``ThroughputModel`` holds one fitted model per catalog model and answers,
cheaply and without side effects:

* ``iter_time(model, plan, placement, cpus, bandwidth)`` -> seconds per
  iteration (memoized per instance: the same query is computed once);
* ``iter_times(model, queries)`` -> many at once, vectorized;
* ``best_plan(model, allowed_plans, gpus, placement, cpus, mem)`` -> the
  fastest feasible plan and its iteration time.

Every plan of a model processes the same global batch per iteration, so a
shorter iteration is a higher throughput (samples/s = global batch / iter
time; ``samples_per_second``).

Conventions: ``cpus`` is the job's total CPU threads, spread evenly over its
GPU processes (None: one thread per GPU, the minimum); ``bandwidth`` is the
inter-node bandwidth each node of the job gets, in GB/s (None: the measured
cluster default, ``Env.net_gbps``), and matters only when the placement spans
nodes; ``mem`` is the host memory available to the job, in GB (None: no
limit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from scheduler.core.perf.catalog import CATALOG, ModelSpec, spec_for
from scheduler.core.perf.data import load_env_bandwidth, load_placements, load_profile
from scheduler.core.perf.fit import FitResult, fit_all
from scheduler.core.perf.holdout import SAMPLED_PER_MODEL, SAMPLE_SEED, sample_rows
from scheduler.core.perf.model import Env, features, iter_time_ms
from scheduler.core.perf.plans import (
    Plan,
    PlanError,
    check_plan_fits,
    fits_gpu_memory,
    parse_placement,
    parse_plan,
    plan_needs,
)

GPU_MEM_GB = 80.0
NODE_GPUS = 8

Query = tuple[str | Plan, str | Sequence[int], float | None, float | None]


def packed_placement(gpus: int, node_gpus: int = NODE_GPUS) -> tuple[int, ...]:
    """Fewest nodes: full nodes of ``node_gpus`` and the remainder on one more."""
    if gpus < 1:
        raise PlanError(f"gpus must be >= 1, got {gpus}")
    full, rest = divmod(gpus, node_gpus)
    return (node_gpus,) * full + ((rest,) if rest else ())


class ThroughputModel:
    """Fitted iteration-time models for the catalog's models.

    Build with ``from_traces`` (fits from the Rubick profiles) or directly
    from ``FitResult``s. Instances are immutable apart from their memo.
    """

    def __init__(self, fits: Mapping[str, FitResult], gpu_mem_gb: float = GPU_MEM_GB):
        if not fits:
            raise ValueError("ThroughputModel needs at least one fitted model")
        self._fits = dict(fits)
        self._gpu_mem_gb = gpu_mem_gb
        self._memo: dict[tuple, float] = {}

    @classmethod
    def from_traces(cls, morphling_dir: str | Path, env: Env | None = None,
                    models: Iterable[str] | None = None, fit_nvlink: bool = True,
                    sampled_per_model: int = SAMPLED_PER_MODEL, seed: int = SAMPLE_SEED) -> "ThroughputModel":
        """Fit every catalog model (or ``models``) from ``<dir>/profiles``
        and ``sampled_per_model`` measured rows of ``<dir>/placements``
        (``holdout.sample_rows``; 0: the profiles only).

        The inter-node default bandwidth comes from ``profiles/env_params.json``
        unless ``env`` is given. The intra-node bandwidth is fitted per model
        (``fit.identifiable``); ``fit_nvlink=False`` holds it at ``env``'s
        for every model instead.
        """
        root = Path(morphling_dir)
        if env is None:
            env = Env(net_gbps=load_env_bandwidth(root / "profiles" / "env_params.json"))
        specs = [spec_for(m) for m in models] if models is not None else list(CATALOG.values())
        profiles = {s.name: (s, load_profile(root / "profiles" / s.profile)) for s in specs}
        rows = {s.name: sample_rows(s.name, load_placements(root / "placements" / f"{s.placements}.csv"),
                                    per_model=sampled_per_model, seed=seed)
                for s in specs} if sampled_per_model else {}
        return cls(fit_all(profiles, env, fit_nvlink, rows))

    def models(self) -> list[str]:
        return sorted(self._fits)

    def fit(self, model: str) -> FitResult:
        """The fitted coefficients and inputs of ``model``."""
        name = spec_for(model).name
        try:
            return self._fits[name]
        except KeyError:
            raise KeyError(f"model {model!r} was not fitted; fitted: {', '.join(self.models())}") from None

    def spec(self, model: str) -> ModelSpec:
        return spec_for(self.fit(model).model)

    def _normalize(self, model: str, plan: str | Plan, placement: str | Sequence[int],
                   cpus: float | None, bandwidth: float | None) -> tuple:
        fit = self.fit(model)
        p = plan if isinstance(plan, Plan) else parse_plan(plan)
        where = parse_placement(placement)
        check_plan_fits(p, where)
        n = sum(where)
        threads = 1.0 if cpus is None else float(cpus) / n
        if threads < 1.0:
            raise PlanError(f"cpus={cpus} is fewer than one thread per GPU process ({n} GPUs)")
        net = fit.env.net_gbps if (bandwidth is None or len(where) == 1) else float(bandwidth)
        if net <= 0:
            raise PlanError(f"bandwidth={bandwidth} must be > 0 GB/s for a placement over {len(where)} nodes")
        return (fit.model, p, where, threads, net)

    def iter_time(self, model: str, plan: str | Plan, placement: str | Sequence[int],
                  cpus: float | None = None, bandwidth: float | None = None) -> float:
        """Predicted seconds per iteration; raises ``PlanError`` on a bad query."""
        key = self._normalize(model, plan, placement, cpus, bandwidth)
        hit = self._memo.get(key)
        if hit is None:
            hit = float(self._predict(key[0], [key[1:]])[0])
            self._memo[key] = hit
        return hit

    def iter_times(self, model: str, queries: Sequence[Query]) -> np.ndarray:
        """Seconds per iteration for many ``(plan, placement, cpus, bandwidth)``."""
        keys = [self._normalize(model, *q) for q in queries]
        if not keys:
            return np.zeros(0)
        return self._predict(keys[0][0], [k[1:] for k in keys])

    def _predict(self, name: str, configs: list[tuple]) -> np.ndarray:
        fit = self._fits[name]
        return iter_time_ms(features(configs), fit.inputs, fit.coeffs, fit.forward, fit.env) / 1000.0

    def samples_per_second(self, model: str, plan: str | Plan, placement: str | Sequence[int],
                           cpus: float | None = None, bandwidth: float | None = None) -> float:
        """Throughput: the model's global batch over the iteration time."""
        return self.spec(model).global_batch / self.iter_time(model, plan, placement, cpus, bandwidth)

    def feasible(self, model: str, plan: str | Plan, placement: Sequence[int],
                 cpus: float | None = None, mem: float | None = None) -> str | None:
        """Why ``plan`` cannot run on ``placement`` (None: it can)."""
        spec = self.spec(model)
        p = plan if isinstance(plan, Plan) else parse_plan(plan)
        try:
            check_plan_fits(p, placement)
        except PlanError as exc:
            return str(exc)
        needs = plan_needs(p, spec.params_mi, placement)
        if cpus is not None and cpus < needs.min_cpus:
            return f"needs {needs.min_cpus} CPU threads, has {cpus:g}"
        if mem is not None and mem < needs.host_mem_gb:
            return f"needs {needs.host_mem_gb:.0f} GB host memory, has {mem:g}"
        if not fits_gpu_memory(p, spec.params_mi, needs.gpus, self._gpu_mem_gb):
            return f"model states need {needs.gpu_state_gb:.0f} GB per GPU, GPUs have {self._gpu_mem_gb:g}"
        return None

    def best_plan(self, model: str, allowed_plans: Iterable[str | Plan], gpus: int,
                  placement: str | Sequence[int] | None = None, cpus: float | None = None,
                  mem: float | None = None, bandwidth: float | None = None) -> tuple[str, float] | None:
        """The fastest feasible allowed plan on ``gpus`` GPUs, with its iteration time.

        ``placement`` defaults to ``packed_placement(gpus)``. Plans that do not
        fit (3D degrees, CPU threads, host memory, GPU memory for model states:
        see ``feasible``) are skipped; ties go to the plan name that sorts
        first. Returns None when no allowed plan is feasible.
        """
        where = packed_placement(gpus) if placement is None else parse_placement(placement)
        if sum(where) != gpus:
            raise PlanError(f"placement {''.join(map(str, where))} holds {sum(where)} GPUs, not {gpus}")
        plans = sorted({(p if isinstance(p, Plan) else parse_plan(p)) for p in allowed_plans}, key=lambda p: p.name)
        runnable = [p for p in plans if self.feasible(model, p, where, cpus, mem) is None]
        if not runnable:
            return None
        times = [self.iter_time(model, p, where, cpus, bandwidth) for p in runnable]
        best = min(range(len(runnable)), key=lambda i: (times[i], runnable[i].name))
        return runnable[best].name, times[best]

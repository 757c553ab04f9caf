"""Fitting the performance model to a model's few profiling runs.

Two least-squares fits on log error (relative error, so a 10 ms and a 10 s
run weigh alike), both with scipy's trust-region solver under bounds:

1. the forward curve ``F(n) = f0 + f1/n`` from the runs' forward times;
2. the seven coefficients from the runs' three measured phases (backward +
   sync ``Tcc``, optimizer ``Topt``, whole iteration), as the authors' code
   does, with the fitted ``F`` standing in for the forward time so that
   fitting and prediction use the same inputs.

Both use a soft-L1 loss (quadratic near zero, linear beyond ``F_SCALE`` in
log units) so that a single inconsistent row, such as t5's 4 ms forward time
at 4 GPUs next to 54 ms at 8, cannot drag the fit. The phase residuals weigh
``PHASE_WEIGHT`` against the iteration's 1 (chosen by leave-one-out over the
profiling runs: ``benchmarks/perf_phase_weight.py``), and a phase measured
under ``PHASE_FLOOR`` of its iteration gives none. Coefficients a model's runs
cannot identify are borrowed (``identifiable``, ``fit_all``). Starting points
are a fixed grid, so a fit is deterministic: same runs, same coefficients.

Besides the seven coefficients, the intra-node collective bandwidth
(``Env.nvlink_gbps``, ``NVLINK``) is fitted per model when the runs can tell
it apart from the backward pass (``identifiable``): communication grows with
the GPU count as (n-1)/n while the backward shrinks roughly as 1/n, so runs
without ZeRO-Offload at three GPU counts above one separate the two.
It is an effective bus bandwidth (NCCL's algorithm, message sizes and
per-call overheads folded in), like the per-model values the authors typed
into their validation scripts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np
from scipy.optimize import least_squares

from scheduler.core.perf.catalog import ModelSpec, compute_scale
from scheduler.core.perf.data import PlacementRow, ProfileRun
from scheduler.core.perf.model import (
    Coeffs,
    Env,
    ForwardCurve,
    ModelInputs,
    components,
    features,
)

F_SCALE = 0.1
LOWER = Coeffs(k_bwd=1.0, k_sync=1.0, k_opt=1e-8, k_os_offload=1e-8, k_const=0.0, k_off=0.0, k_swap=0.0,
               k_3d=0.2, k_stage=0.0)
UPPER = Coeffs(k_bwd=10.0, k_sync=50.0, k_opt=np.inf, k_os_offload=np.inf, k_const=np.inf,
               k_off=np.inf, k_swap=np.inf, k_3d=10.0, k_stage=np.inf)
START = Coeffs(k_bwd=2.0, k_sync=2.0, k_opt=0.01, k_os_offload=1.0, k_const=5.0, k_off=5.0, k_swap=5.0,
               k_3d=1.0, k_stage=1.0)
K_SYNC_STARTS = (1.5, 4.0, 12.0)
PHASE_FLOOR = 0.01
PHASE_WEIGHT = 0.1
# Name of the fitted intra-node bandwidth among coefficient names (``fixed``,
# ``borrowed``, ``identifiable``) and its bounds in GB/s: from below PCIe to
# above what an 8-GPU NVLink node's all-reduce bus bandwidth reaches.
NVLINK = "nvlink_gbps"
NVLINK_BOUNDS = (5.0, 400.0)
# GPU counts above one, without ZeRO-Offload, that the runs need for the
# bandwidth to be fitted (``identifiable`` says why three).
NVLINK_MIN_COUNTS = 3
# Coefficients of 3D plans only (``model.Coeffs``), fitted from sampled
# placement rows after the profiles have fixed the rest.
THREE_D = ("k_3d", "k_stage")
# What a 3D coefficient is held at when a model's rows cannot identify it:
# the form without it (same work as the data-parallel runs, no stage cost).
# Not borrowed from other models: t5's 3D implementation does 2.8x the work
# of its data-parallel runs and gpt2's 0.9x, so no median would stand for a
# model that was not measured.
THREE_D_NEUTRAL = {"k_3d": 1.0, "k_stage": 0.0}
# CPU threads per GPU process of a measured placement row (the placements do
# not record them): ZeRO-Offload rows as the offload profiles, 4; others 1.
OFFLOAD_THREADS = 4.0


class FitError(ValueError):
    """The profiling runs cannot be fitted (too few, inconsistent models)."""


@dataclass(frozen=True, slots=True)
class FitResult:
    """A fitted model: everything ``model.iter_time_ms`` needs for one model."""

    model: str
    coeffs: Coeffs
    forward: ForwardCurve
    inputs: ModelInputs
    env: Env
    runs: int
    cost: float
    borrowed: tuple[str, ...] = ()

    def fitted_values(self) -> dict[str, float]:
        """The seven coefficients and the intra-node bandwidth, by name."""
        return {**self.coeffs.as_dict(), NVLINK: self.env.nvlink_gbps}


def fit_forward(runs: Sequence[ProfileRun]) -> ForwardCurve:
    """Fit ``f0 + f1/n`` (ms, both >= 0) to the runs' forward times."""
    n = np.array([r.gpus for r in runs], dtype=float)
    y = np.log([r.forward_ms for r in runs])

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(x[0] + x[1] / n) - y

    biggest = float(max(r.forward_ms * r.gpus for r in runs))
    sol = least_squares(resid, x0=[1e-3 * biggest, biggest], bounds=([1e-9, 1e-9], [np.inf, np.inf]),
                        loss="soft_l1", f_scale=F_SCALE, method="trf")
    return ForwardCurve(float(sol.x[0]), float(sol.x[1]))


def _profile_configs(runs: Sequence[ProfileRun], env: Env):
    """Model configurations of the profiling runs (nodes filled evenly)."""
    out = []
    for r in runs:
        per = r.gpus // r.nodes
        placement = tuple(per + (1 if i < r.gpus - per * r.nodes else 0) for i in range(r.nodes))
        out.append((r.plan, placement, float(r.threads), env.net_gbps))
    return out


def _row_configs(rows: Sequence[PlacementRow], env: Env):
    """Model configurations of sampled placement rows (threads as ``OFFLOAD_THREADS`` rule)."""
    return [(r.plan, r.placement, OFFLOAD_THREADS if r.plan.memory == "zero-offload" else 1.0, env.net_gbps)
            for r in rows]


def identifiable(runs: Sequence[ProfileRun], rows: Sequence[PlacementRow] = ()) -> frozenset[str]:
    """Coefficients that the runs (and the sampled placement rows) can pin down.

    ``k_opt`` prices the optimizer step on the GPU, so only runs without
    ZeRO-Offload see it; ``k_os_offload``, ``k_off`` and ``k_swap`` only
    ZeRO-Offload runs see. ``k_bwd`` needs a run without ZeRO-Offload too:
    in an offload run the backward phase also carries the gradient offload,
    which shrinks like the backward (as 1/n), so the two cannot be told apart.
    The intra-node bandwidth (``NVLINK``) needs runs without ZeRO-Offload at
    ``NVLINK_MIN_COUNTS`` (three) GPU counts above one: communication time
    grows as (n-1)/n while the backward shrinks, and one GPU does not
    communicate. Two counts determine the split exactly but leave nothing
    to check it: leaving one profiling run out and predicting it
    (``benchmarks/perf_phase_weight.py``) gives a mean error of 8.2 % when
    two counts suffice, 6.0 % when three are required (5.6 % with the
    bandwidth held at the default).

    The profiling runs are all data parallel, so the 3D coefficients come
    from sampled placement rows only: ``k_3d`` from any 3D row, ``k_stage``
    from 3D rows at two pipeline depths or more (one depth cannot separate a
    stage's cost from the compute).
    """
    names = {"k_sync", "k_const"}
    memories = {r.plan.memory for r in runs}
    if memories - {"zero-offload"}:
        names |= {"k_opt", "k_bwd"}
    if "zero-offload" in memories:
        names |= {"k_os_offload", "k_off", "k_swap"}
    if len({r.gpus for r in runs if r.plan.memory != "zero-offload" and r.gpus > 1}) >= NVLINK_MIN_COUNTS:
        names.add(NVLINK)
    depths = {r.plan.pp for r in rows if r.plan.is_3d}
    if depths:
        names.add("k_3d")
    if len(depths) >= 2:
        names.add("k_stage")
    return frozenset(names)


def fit_coeffs(runs: Sequence[ProfileRun], inputs: ModelInputs, fwd: ForwardCurve, env: Env,
               fixed: Mapping[str, float] | None = None, rows: Sequence[PlacementRow] = (),
               row_model: tuple[ModelInputs, ForwardCurve] | None = None) -> tuple[Coeffs, Env, float]:
    """Least squares on the log error of the three measured phases.

    Sampled placement ``rows`` add one residual each, on their iteration
    time (weight 1, like a profiling run's iteration): the placements'
    component columns are not the profiles' phases (a 3D row books its
    whole compute under ``overlap_sync``), so they are not used. The rows
    measured the predicted model, which may not be the profiled one
    (llama30 is fitted from llama7's runs): ``row_model`` gives their
    inputs and forward curve (default: ``inputs`` and ``fwd``).

    Coefficients named in ``fixed`` are held at the given values; the rest
    are fitted, and so is the intra-node bandwidth unless ``fixed`` names
    ``NVLINK`` (it starts from ``env.nvlink_gbps`` and is fitted in log
    space within ``NVLINK_BOUNDS``). Returns the coefficients, ``env`` with
    the fitted or fixed bandwidth, and the final cost (half the sum of the
    robust loss over all residuals).
    """
    fixed = dict(fixed or {})
    names = Coeffs.names() + (NVLINK,)
    free = [i for i, name in enumerate(names) if name not in fixed]
    feats = features(_profile_configs(runs, env))
    row_feats = features(_row_configs(rows, env)) if rows else None
    row_inputs, row_fwd = row_model or (inputs, fwd)
    measured = np.array([[r.sync_ms, r.opt_ms, r.iter_ms] for r in runs]
                        + [[1.0, 1.0, 1000.0 * r.iter_s] for r in rows], dtype=float).reshape(-1, 3)
    # A phase measured as a sliver of its iteration (llama's Topt = 1 ms of
    # 9.4 s) was folded into another phase by the profiler; it gives no residual.
    weight = (measured >= PHASE_FLOOR * measured[:, 2:3]) * np.array([[PHASE_WEIGHT, PHASE_WEIGHT, 1.0]])
    weight[len(runs):, :2] = 0.0
    targets = np.log(measured)
    # The bandwidth is carried as its logarithm so that the solver's steps
    # are relative, like the other coefficients' effects.
    start_values = {**START.as_dict(), NVLINK: env.nvlink_gbps, **fixed}
    full = np.array([start_values[name] for name in names], dtype=float)
    # A starting bandwidth outside the bounds (an Env given by the caller)
    # starts the solver at the nearest bound instead of failing.
    full[-1] = np.log(full[-1] if NVLINK in fixed else np.clip(full[-1], *NVLINK_BOUNDS))

    def expand(x: np.ndarray) -> np.ndarray:
        out = full.copy()
        out[free] = x
        return out

    def unpack(x: np.ndarray) -> tuple[Coeffs, Env]:
        values = expand(x)
        coeffs = Coeffs(*(float(v) for v in values[:-1]))
        if NVLINK in fixed:
            return coeffs, replace(env, nvlink_gbps=float(fixed[NVLINK]))
        return coeffs, replace(env, nvlink_gbps=float(np.exp(values[-1])))

    def resid(x: np.ndarray) -> np.ndarray:
        coeffs, fitted_env = unpack(x)
        c = components(feats, inputs, coeffs, fwd, fitted_env)
        pred = np.stack([c["sync"], c["opt"], c["total"]], axis=1)
        if row_feats is not None:
            total = components(row_feats, row_inputs, coeffs, row_fwd, fitted_env)["total"]
            pred = np.concatenate([pred, np.stack([total, total, total], axis=1)])
        return (weight * (np.log(np.maximum(pred, 1e-9)) - targets)).ravel()

    lower = np.array(list(LOWER.as_dict().values()) + [np.log(NVLINK_BOUNDS[0])])[free]
    upper = np.array(list(UPPER.as_dict().values()) + [np.log(NVLINK_BOUNDS[1])])[free]
    best = None
    # Several starts only matter for k_sync (the overlap exponent has local
    # minima); with it held, one start gives the same solution.
    for k_sync in (K_SYNC_STARTS if "k_sync" not in fixed else K_SYNC_STARTS[:1]):
        start = full.copy()
        if "k_sync" not in fixed:
            start[names.index("k_sync")] = k_sync
        sol = least_squares(resid, x0=start[free], bounds=(lower, upper), loss="soft_l1",
                            f_scale=F_SCALE, method="trf")
        if best is None or sol.cost < best.cost - 1e-12:
            best = sol
    coeffs, fitted_env = unpack(best.x)
    return coeffs, fitted_env, float(best.cost)


def fit_model(spec: ModelSpec, runs: Sequence[ProfileRun], env: Env,
              fallback: Mapping[str, float] | None = None, fit_nvlink: bool = True,
              rows: Sequence[PlacementRow] = ()) -> FitResult:
    """Fit ``spec``'s model from its profiling runs.

    Coefficients the runs cannot identify (see ``identifiable``) are held at
    ``fallback`` (default: the solver's starting values, and ``env``'s
    intra-node bandwidth) and listed in ``FitResult.borrowed``. With
    ``fit_nvlink=False`` the intra-node bandwidth stays ``env``'s for every
    model (the form before it was fitted; kept for comparison) and is not
    listed as borrowed. The coefficients are fitted with the profiled
    model's own parameter count (from the runs); predictions use ``spec``'s,
    and when the runs measured another model (``spec.profile_model``) the
    forward curve is scaled by ``catalog.compute_scale``.
    """
    if len(runs) < 2:
        raise FitError(f"{spec.name}: need at least 2 profiling runs, got {len(runs)}")
    sizes = {round(r.params_mi, 6) for r in runs}
    if len(sizes) != 1:
        raise FitError(f"{spec.name}: profiling runs disagree on parameter_size: {sorted(sizes)}")
    if len({r.gpus for r in runs}) < 2:
        raise FitError(f"{spec.name}: profiling runs need at least two GPU counts to fit F(n)")
    fwd = fit_forward(runs)
    profiled = ModelInputs(runs[0].params_mi, spec.global_batch, spec.seq_hid, spec.layers)
    known = identifiable(runs, rows)
    source = {**START.as_dict(), NVLINK: env.nvlink_gbps, **(fallback or {}), **THREE_D_NEUTRAL}
    fixed = {name: source[name] for name in Coeffs.names() + (NVLINK,) if name not in known}
    borrowed = tuple(sorted(name for name in fixed if name not in THREE_D))
    if not fit_nvlink:
        fixed[NVLINK] = env.nvlink_gbps
        borrowed = tuple(name for name in borrowed if name != NVLINK)
    scale = compute_scale(spec)
    predicted = ModelInputs(spec.params_mi, spec.global_batch, spec.seq_hid, spec.layers)
    forward = ForwardCurve(fwd.f0 * scale, fwd.f1 * scale)
    # Two stages: the profiles alone fix every data-parallel coefficient and
    # the bandwidth (3D coefficients do not enter a data-parallel run), then
    # the sampled 3D rows fit only the 3D coefficients. A few 3D rows thus
    # cannot pull the data-parallel fit: data-parallel predictions are the
    # profiles' alone.
    coeffs, env, cost = fit_coeffs(runs, profiled, fwd, env, {**fixed, **{n: source[n] for n in THREE_D}})
    if rows:
        settled = {**coeffs.as_dict(), NVLINK: env.nvlink_gbps}
        held = {n: (fixed[n] if n in fixed else v) for n, v in settled.items() if n not in THREE_D or n in fixed}
        coeffs, env, cost = fit_coeffs(runs, profiled, fwd, env, held, rows, (predicted, forward))
    return FitResult(
        model=spec.name,
        coeffs=coeffs,
        forward=forward,
        inputs=predicted,
        env=env,
        runs=len(runs),
        cost=cost,
        borrowed=borrowed,
    )


def fit_all(profiles: Mapping[str, tuple[ModelSpec, Sequence[ProfileRun]]], env: Env,
            fit_nvlink: bool = True,
            rows: Mapping[str, Sequence[PlacementRow]] | None = None) -> dict[str, FitResult]:
    """Fit every model; borrow unidentifiable coefficients from the others.

    A coefficient a model's runs cannot identify is set to the median of the
    values fitted for the models whose runs do identify it: ``k_opt``
    (optimizer time per parameter on the GPU) and the offload coefficients
    price the hardware more than the model, and so does the intra-node
    bandwidth (LLaMA's offload-only profiles borrow it). Models are processed in sorted
    name order, so the result does not depend on the mapping's order.
    """
    rows = rows or {}
    first = {name: fit_model(spec, runs, env, fit_nvlink=fit_nvlink, rows=rows.get(name, ()))
             for name, (spec, runs) in sorted(profiles.items())}
    pooled = {}
    for coeff in Coeffs.names() + (NVLINK,):
        if coeff in THREE_D:
            continue
        values = [r.fitted_values()[coeff] for r in first.values() if coeff not in r.borrowed]
        if values:
            pooled[coeff] = float(np.median(values))
    return {
        name: (fit_model(spec, runs, env, pooled, fit_nvlink, rows.get(name, ())) if first[name].borrowed
               else first[name])
        for name, (spec, runs) in sorted(profiles.items())
    }

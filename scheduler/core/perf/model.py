"""Rubick's iteration-time model: the functional form.

Follows Zhang et al., "Rubick: Exploiting Job Reconfigurability for Deep
Learning Cluster Scheduling" (arXiv 2408.08586), section 4, and the authors'
code (AlibabaPAI/reconfigurable-dl-scheduler, ``sched/morphling_sched/
pred_throughput.py``, Apache-2.0): the seven coefficients keep the authors'
names and meanings so they can be compared with ``fitted_params.csv``. Where
this module departs from that code it says so (``docs/perf_model.md`` has the
full derivation).

Units: times in milliseconds, sizes in MiB, bandwidths in GB/s taken as
MiB/ms, parameter counts ``P`` in Mi (2**20) parameters.

Data-parallel family on ``n`` GPUs over ``N`` nodes (``c`` CPU threads per
GPU process, ``net`` inter-node GB/s per node)::

    T_fwd  = F(n) = f0 + f1/n                        fitted forward curve
    T_bwd  = k_bwd T_fwd   (+ T_fwd with gradient checkpointing: recompute)
    ring(S, p) = p S (n-1)/n / nvlink                           one node
               = p S ((g-1)/g / nvlink + (N-1)/N / net)   hierarchical
    T_grad = ring(GRAD_BYTES P, 2)    (ZeRO: ring(GRAD_BYTES P, 1), a reduce-scatter)
    T_sync = (T_bwd^k_sync + T_grad^k_sync)^(1/k_sync)     overlap, k_sync >= 1
    ZeRO-Offload: T_off = OFFLOAD_BYTES P / n / pcie
                  T_sync += k_off + T_off
                  T_opt   = k_os_offload P / (n c) + k_swap + T_off
    ZeRO-DP:      T_opt   = k_opt P / n
    otherwise:    T_opt   = k_opt P
    ZeRO (both):  T_opt  += ring(PARAM_BYTES P, 1)        parameter all-gather
    T_iter = T_fwd + T_sync + T_opt + k_const

3D plan ``pp tp dp`` (ranks laid out tensor-fastest, then data, then
pipeline, filling the placement's nodes in order; a group "crosses" when
its ranks sit on more than one node and then runs at ``net``)::

    T_fwd  = F(1) bubble / (tp dp),  bubble = (M + pp - 1) / (M pp)
    T_bwd  = k_bwd T_fwd
    T_grad = 2 (dp-1)/dp GRAD_BYTES P / (tp pp) / B_dp
    T_sync = (T_bwd^k_sync + T_grad^k_sync)^(1/k_sync)
    T_tp   = TP_BYTES (tp-1)/tp (batch/dp) seq_hid / MiB / B_tp
    T_pp   = PP_BYTES (batch/dp) (seq_hid/layers) / MiB  x  sum over stage
             boundaries of 1 / B_boundary
    T_opt  = k_opt P / (tp pp)
    T_iter = T_fwd + T_sync + T_tp + T_pp + T_opt + k_const

``M`` (micro-batches per iteration) is 1: in the released measurements
adding pipeline stages at a fixed tensor- and data-parallel degree never
shortens an iteration (e.g. t5 141/241/441/841 take 0.84/0.87/0.97/1.16 s),
which is what a single micro-batch gives.

Departures from the authors' code, each for a stated reason: the forward
time is a fitted curve of the GPU count instead of a number typed in per
configuration; ZeRO's communication is a reduce-scatter plus an all-gather
rather than an all-reduce inside the backward; multi-node rings are
hierarchical; the 3D terms are derived from the rank layout instead of
per-configuration forward times.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Sequence

import numpy as np

from scheduler.core.perf.plans import Plan, check_plan_fits

GRAD_BYTES = 2.0
PARAM_BYTES = 2.0
OFFLOAD_BYTES = 4.0
TP_BYTES = 16.0
PP_BYTES = 4.0
MICRO_BATCHES = 1
MIB = 1024.0**2

MEMORY_CODES = {"none": 0, "zero-offload": 1, "zero-dp": 2}


@dataclass(frozen=True, slots=True)
class Coeffs:
    """The fitted coefficients: the authors' seven, named as in their code,
    and two for 3D plans that only measured 3D rows can identify.

    ``k_3d`` is the compute of the 3D (tensor and pipeline parallel)
    implementation relative to the data-parallel runs the forward curve was
    fitted on (t5's 3D runs do about 2.1x the work per sample of its
    data-parallel runs, gpt2's about the same); ``k_stage`` is the time, in
    ms, each pipeline-stage boundary adds to an iteration beyond the
    activation transfer (scheduling the stage's send and receive, the
    stages' imbalance). Their defaults (1 and 0) are the form before they
    were fitted.
    """

    k_bwd: float
    k_sync: float
    k_opt: float
    k_os_offload: float
    k_const: float
    k_off: float
    k_swap: float
    k_3d: float = 1.0
    k_stage: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True, slots=True)
class Env:
    """Cluster constants: bandwidths in GB/s.

    ``net_gbps`` is the default inter-node bandwidth a job gets when the
    caller passes none (the measured constant of ``env_params.json``).
    ``nvlink_gbps`` is the effective bandwidth of collectives inside a node;
    150 (an all-reduce bus bandwidth typical of NVLink A800 nodes) is only
    the starting value: ``fit`` fits it per model where the profiles can
    identify it and borrows it otherwise. ``pcie_gbps`` is a PCIe 4.0 x16
    effective rate, not fitted (offload profiles cannot separate it from
    ``k_off`` and ``k_swap``).
    """

    nvlink_gbps: float = 150.0
    pcie_gbps: float = 25.0
    net_gbps: float = 6.89


@dataclass(frozen=True, slots=True)
class ForwardCurve:
    """Forward time of one iteration on ``n`` data-parallel GPUs: f0 + f1/n ms."""

    f0: float
    f1: float

    def at(self, n: np.ndarray | float) -> np.ndarray:
        return self.f0 + self.f1 / np.asarray(n, dtype=float)


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """Per-model constants the formula needs (see ``catalog.ModelSpec``)."""

    params_mi: float
    global_batch: float
    seq_hid: float
    layers: float


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a 3D plan's communication groups cross node boundaries."""

    tp_cross: bool
    dp_cross: bool
    pp_cross: int
    pp_local: int


def layout_3d(plan: Plan, placement: Sequence[int]) -> Layout:
    """Rank layout of a 3D plan on a placement (tensor, data, pipeline order)."""
    check_plan_fits(plan, placement)
    node_of = [i for i, g in enumerate(placement) for _ in range(g)]
    tp, dp, pp = plan.tp, plan.dp, plan.pp

    def rank(p: int, d: int, t: int) -> int:
        return p * tp * dp + d * tp + t

    tp_cross = any(
        node_of[rank(p, d, 0)] != node_of[rank(p, d, t)]
        for p in range(pp) for d in range(dp) for t in range(tp)
    )
    dp_cross = any(
        node_of[rank(p, 0, t)] != node_of[rank(p, d, t)]
        for p in range(pp) for t in range(tp) for d in range(dp)
    )
    worst = 0
    for d in range(dp):
        for t in range(tp):
            worst = max(worst, sum(node_of[rank(p, d, t)] != node_of[rank(p + 1, d, t)] for p in range(pp - 1)))
    return Layout(tp_cross, dp_cross, worst, pp - 1 - worst)


@dataclass(frozen=True, slots=True)
class Features:
    """A batch of configurations as arrays, one entry per configuration."""

    n: np.ndarray
    nodes: np.ndarray
    threads: np.ndarray
    net: np.ndarray
    memory: np.ndarray
    gc: np.ndarray
    pp: np.ndarray
    tp: np.ndarray
    dp: np.ndarray
    tp_cross: np.ndarray
    dp_cross: np.ndarray
    pp_cross: np.ndarray
    pp_local: np.ndarray

    @property
    def is_3d(self) -> np.ndarray:
        return self.pp > 0


def features(configs: Sequence[tuple[Plan, Sequence[int], float, float]]) -> Features:
    """Arrays for ``(plan, placement, threads_per_gpu_process, net_gbps)`` rows."""
    cols: dict[str, list[float]] = {f.name: [] for f in fields(Features)}
    for plan, placement, threads, net in configs:
        lay = layout_3d(plan, placement) if plan.is_3d else Layout(False, False, 0, 0)
        row = dict(
            n=sum(placement), nodes=len(placement), threads=threads, net=net,
            memory=MEMORY_CODES[plan.memory], gc=float(plan.gc), pp=plan.pp, tp=plan.tp, dp=plan.dp,
            tp_cross=float(lay.tp_cross), dp_cross=float(lay.dp_cross),
            pp_cross=lay.pp_cross, pp_local=lay.pp_local,
        )
        for k, v in row.items():
            cols[k].append(float(v))
    return Features(**{k: np.asarray(v, dtype=float) for k, v in cols.items()})


def _overlap(a: np.ndarray, b: np.ndarray, gamma: float) -> np.ndarray:
    """Smooth maximum (a^g + b^g)^(1/g), computed stably; g=1 is a+b, g->inf max."""
    hi = np.maximum(np.maximum(a, b), 1e-12)
    return hi * ((a / hi) ** gamma + (b / hi) ** gamma) ** (1.0 / gamma)


def _placement_collective_ms(f: Features, env: Env, size_mib: np.ndarray | float,
                             passes: np.ndarray | float) -> np.ndarray:
    """Ring passes over all of a placement's GPUs (data-parallel family).

    One node: a ring over NVLink, (n-1)/n of the data per pass. Several
    nodes: hierarchical, as NCCL does it: a pass inside each node over
    NVLink ((g-1)/g, g the mean GPUs per node) and a ring among the N nodes
    over each node's network share ((N-1)/N of the data at ``net`` GB/s).
    """
    g = f.n / f.nodes
    single = (f.n - 1.0) / f.n / env.nvlink_gbps
    multi = (g - 1.0) / g / env.nvlink_gbps + (f.nodes - 1.0) / f.nodes / f.net
    return passes * size_mib * np.where(f.nodes > 1, multi, single)


def _group_collective_ms(size: np.ndarray, cross: np.ndarray, f: Features, env: Env,
                         size_mib: np.ndarray, passes: float) -> np.ndarray:
    """Ring passes within groups of ``size`` ranks (3D plans' tensor/data groups)."""
    bandwidth = np.where(cross > 0, f.net, env.nvlink_gbps)
    return passes * (size - 1.0) / size * size_mib / bandwidth


def components(f: Features, m: ModelInputs, k: Coeffs, fwd: ForwardCurve, env: Env) -> dict[str, np.ndarray]:
    """Per-phase times (ms) for every configuration in ``f``.

    Returns ``fwd`` (forward pass), ``sync`` (backward, including the
    checkpoint recompute, overlapped with gradient communication, plus
    offload), ``opt`` (optimizer phase, including ZeRO's parameter
    all-gather), ``extra`` (tensor and pipeline communication of 3D plans)
    and ``total`` (their sum plus ``k_const``).
    """
    P = m.params_mi
    is3d = f.is_3d
    tp, pp, dp = (np.where(is3d, x, 1.0) for x in (f.tp, f.pp, f.dp))
    offload = f.memory == MEMORY_CODES["zero-offload"]
    zero_dp = f.memory == MEMORY_CODES["zero-dp"]
    zero = offload | zero_dp

    bubble = (MICRO_BATCHES + pp - 1.0) / (MICRO_BATCHES * pp)
    t_fwd = np.where(is3d, k.k_3d * fwd.at(1.0) * bubble / (tp * dp), fwd.at(f.n))
    t_bwd = k.k_bwd * t_fwd + f.gc * t_fwd

    # Gradients are all-reduced (two ring passes) while the backward pass runs;
    # ZeRO reduce-scatters them instead (one pass) and all-gathers the updated
    # parameters (one more pass) after the optimizer step.
    grads = GRAD_BYTES * P / (tp * pp)
    t_grad = np.where(
        is3d,
        _group_collective_ms(dp, f.dp_cross, f, env, grads, 2.0),
        _placement_collective_ms(f, env, grads, np.where(zero, 1.0, 2.0)),
    )
    t_gather = np.where(zero, _placement_collective_ms(f, env, PARAM_BYTES * P, 1.0), 0.0)
    t_off = np.where(offload, OFFLOAD_BYTES * P / f.n / env.pcie_gbps, 0.0)
    t_sync = _overlap(t_bwd, t_grad, k.k_sync) + np.where(offload, k.k_off + t_off, 0.0)

    t_opt = np.select(
        [is3d, offload, zero_dp],
        [k.k_opt * P / (tp * pp), k.k_os_offload * P / (f.n * f.threads) + k.k_swap + t_off, k.k_opt * P / f.n],
        k.k_opt * P,
    ) + t_gather

    # 3D: activations all-reduced inside tensor groups (2 per layer forward,
    # 2 backward) and sent between pipeline stages (forward and backward).
    samples = m.global_batch / dp
    t_tp = _group_collective_ms(tp, f.tp_cross, f, env, TP_BYTES / 2.0 * samples * m.seq_hid / MIB, 2.0)
    boundary = PP_BYTES * samples * (m.seq_hid / m.layers) / MIB
    t_pp = boundary * (f.pp_cross / f.net + f.pp_local / env.nvlink_gbps) + k.k_stage * (f.pp_cross + f.pp_local)
    t_extra = np.where(is3d, t_tp + t_pp, 0.0)

    total = t_fwd + t_sync + t_opt + t_extra + k.k_const
    return {"fwd": t_fwd, "sync": t_sync, "opt": t_opt, "extra": t_extra, "total": total}


def iter_time_ms(f: Features, m: ModelInputs, k: Coeffs, fwd: ForwardCurve, env: Env) -> np.ndarray:
    """Predicted iteration time (ms) of every configuration in ``f``."""
    return components(f, m, k, fwd, env)["total"]

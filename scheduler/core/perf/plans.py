"""Execution plans and placements: parsing, validity and resource needs.

An execution plan says how a training job uses its GPUs:

* data-parallel family (any GPU count): ``ga`` (data parallel with gradient
  accumulation), ``gc`` (``ga`` plus gradient checkpointing), ``zero-dp``
  (ZeRO stage 2: gradients and optimizer state partitioned over the GPUs),
  ``zero-offload`` (ZeRO-2 with optimizer state and step on the CPU), and the
  combinations ``zero-dp+gc`` and ``zero-offload+gc``;
* 3D parallel: three digits ``"<pp><tp><dp>"`` (pipeline, tensor and data
  parallel degrees), e.g. ``"248"``; it needs exactly ``pp * tp * dp`` GPUs.

A placement lists the GPUs a job holds on each node, one entry a node:
``"233"`` or ``(2, 3, 3)`` is three nodes with 2, 3 and 3 GPUs.

Resource needs (``plan_needs``) rest on these documented assumptions, all
named constants below so a caller can see and override them:

* every GPU runs one training process that needs at least one CPU thread;
* host memory: ``HOST_MEM_PER_PROCESS_GB`` per process (data loader, CUDA
  context, pinned buffers), plus, for ZeRO-Offload, the optimizer state kept
  on the host: fp32 master weights and Adam's two moments (12 bytes/param)
  and fp16 gradient and parameter staging buffers (4 bytes/param);
* GPU memory counts model states only (mixed-precision Adam, 16 bytes/param:
  fp16 weights 2 + fp16 gradients 2 + fp32 master 4 + two fp32 moments 8),
  partitioned as each plan partitions them; activations are NOT counted
  (they depend on batch and sequence sizes the traces do not give), so
  ``fits_gpu_memory`` is a necessary, not a sufficient, condition;
* network: a plan needs inter-node bandwidth exactly when its placement spans
  more than one node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence


HOST_MEM_PER_PROCESS_GB = 4.0
OFFLOAD_HOST_BYTES_PER_PARAM = 16.0
STATE_BYTES_PER_PARAM = 16.0
FP16_BYTES = 2.0
GIB = 1024.0**3
MIB_PARAMS = 1024.0**2

_3D_RE = re.compile(r"^[1-9]{3}$")


class PlanError(ValueError):
    """A plan or placement string that cannot be parsed or does not fit."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One execution plan.

    ``memory`` is ``"none"``, ``"zero-dp"`` or ``"zero-offload"`` for the
    data-parallel family; ``gc`` is gradient checkpointing. A 3D plan has
    ``pp, tp, dp >= 1`` (and ``memory == "none"``, ``gc == False``); a
    data-parallel-family plan has ``pp == tp == dp == 0``.
    """

    memory: str = "none"
    gc: bool = False
    pp: int = 0
    tp: int = 0
    dp: int = 0

    @property
    def is_3d(self) -> bool:
        return self.pp > 0

    @property
    def fixed_gpus(self) -> int | None:
        """GPUs the plan needs (3D), or None when any count works."""
        return self.pp * self.tp * self.dp if self.is_3d else None

    @property
    def name(self) -> str:
        """Canonical text form; ``parse_plan(p.name) == p``."""
        if self.is_3d:
            return f"{self.pp}{self.tp}{self.dp}"
        if self.memory == "none":
            return "gc" if self.gc else "ga"
        return self.memory + ("+gc" if self.gc else "")

    def __str__(self) -> str:
        return self.name


def parse_plan(text: str) -> Plan:
    """Parse a plan name (see the module docstring); raise ``PlanError``."""
    if not isinstance(text, str):
        raise PlanError(f"plan must be a string, got {type(text).__name__}")
    s = text.strip().lower()
    if _3D_RE.fullmatch(s):
        return Plan(pp=int(s[0]), tp=int(s[1]), dp=int(s[2]))
    parts = s.split("+")
    with_gc = len(parts) == 2 and parts[1] == "gc" and parts[0] != "gc"
    if len(parts) > 2 or (len(parts) == 2 and not with_gc):
        raise PlanError(f"unknown plan {text!r}: only '+gc' may follow ga, zero-dp or zero-offload")
    base = parts[0]
    if base == "gc":
        base, with_gc = "ga", True
    memory = {"ga": "none", "zero-dp": "zero-dp", "zero-offload": "zero-offload"}.get(base)
    if memory is None:
        raise PlanError(
            f"unknown plan {text!r}: expected ga, gc, zero-dp, zero-offload "
            "(optionally '+gc') or three digits 'pp tp dp' each 1-9"
        )
    gc = with_gc
    return Plan(memory=memory, gc=gc)


def parse_placement(value: str | Sequence[int]) -> tuple[int, ...]:
    """Parse ``"233"`` or ``(2, 3, 3)`` into a tuple of GPUs per node.

    Every node must hold at least one GPU. Digit strings cannot express a node
    with ten or more GPUs; pass a tuple for those.
    """
    if isinstance(value, str):
        s = value.strip()
        if not s or not (s.isascii() and s.isdigit()):
            raise PlanError(f"placement {value!r} must be digits, one per node (e.g. '233')")
        parts = tuple(int(c) for c in s)
    else:
        try:
            parts = tuple(int(g) for g in value)
        except (TypeError, ValueError):
            raise PlanError(f"placement {value!r} must be a sequence of GPU counts") from None
    if not parts:
        raise PlanError("placement is empty")
    if any(g < 1 for g in parts):
        raise PlanError(f"placement {value!r}: every node must hold at least one GPU")
    return parts


def check_plan_fits(plan: Plan, placement: Sequence[int]) -> None:
    """Raise ``PlanError`` when a 3D plan's degrees do not match the placement."""
    n = sum(placement)
    if plan.is_3d:
        if plan.fixed_gpus != n:
            raise PlanError(
                f"plan {plan.name} needs pp*tp*dp = {plan.fixed_gpus} GPUs, "
                f"placement {''.join(map(str, placement))} has {n}"
            )
        if plan.tp > max(placement):
            raise PlanError(
                f"plan {plan.name}: tensor-parallel degree {plan.tp} exceeds the largest "
                f"node share {max(placement)}"
            )


@dataclass(frozen=True, slots=True)
class Needs:
    """What a plan needs on a placement, besides the GPUs themselves."""

    gpus: int
    min_cpus: int
    host_mem_gb: float
    gpu_state_gb: float
    cross_node: bool


def gpu_state_gb(plan: Plan, params_mi: float, gpus: int) -> float:
    """Model-state memory per GPU in GiB (activations not counted)."""
    p = params_mi * MIB_PARAMS
    if plan.is_3d:
        per_gpu = STATE_BYTES_PER_PARAM * p / (plan.tp * plan.pp)
    elif plan.memory == "zero-dp":
        per_gpu = FP16_BYTES * p + (STATE_BYTES_PER_PARAM - FP16_BYTES) * p / gpus
    elif plan.memory == "zero-offload":
        per_gpu = FP16_BYTES * p + FP16_BYTES * p / gpus
    else:
        per_gpu = STATE_BYTES_PER_PARAM * p
    return per_gpu / GIB


def plan_needs(plan: Plan, params_mi: float, placement: Sequence[int]) -> Needs:
    """Resources ``plan`` needs for a model of ``params_mi`` Mi parameters."""
    gpus = sum(placement)
    host = HOST_MEM_PER_PROCESS_GB * gpus
    if plan.memory == "zero-offload":
        host += OFFLOAD_HOST_BYTES_PER_PARAM * params_mi * MIB_PARAMS / GIB
    return Needs(
        gpus=gpus,
        min_cpus=gpus,
        host_mem_gb=host,
        gpu_state_gb=gpu_state_gb(plan, params_mi, gpus),
        cross_node=len(placement) > 1,
    )


def fits_gpu_memory(plan: Plan, params_mi: float, gpus: int, gpu_mem_gb: float) -> bool:
    """Necessary condition: the model states fit in one GPU's memory."""
    return gpu_state_gb(plan, params_mi, gpus) <= gpu_mem_gb

"""Which measured placement rows the fit may see, and which are held out.

The performance model is fitted on the profiling runs plus at most
``SAMPLED_PER_MODEL`` (4) measured placement rows per model, drawn from its
3D plans only, and is validated on the other rows only. The profiles are
all data parallel: no profiling run uses tensor or pipeline parallelism,
so nothing in them says how much work a model's 3D implementation does
per sample or what a pipeline stage costs (``model.Coeffs.k_3d`` and
``k_stage``). Data-parallel rows are not sampled: drawing eight rows from
every plan group instead (multi-node ones included) made the held-out
data-parallel errors worse for bert and t5 (a few multi-node rows pull the
single-node fit) and did not fix vit's multi-node rows, which no term of
the form can express (``docs/perf_model.md``).

The sample is deterministic (a seeded shuffle, ``SAMPLE_SEED``) and spread
over the model's 3D groups: groups take turns, each contributing its next
row in shuffled order. The selection depends only on the rows and the
seed, never on predictions. Models without 3D rows (vit, roberta, bert)
are fitted from their profiles alone.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Callable, Mapping, Sequence

from scheduler.core.perf.data import PlacementRow
from scheduler.core.perf.plans import Plan

SAMPLED_PER_MODEL = 4
SAMPLE_SEED = 16

RowKey = tuple[str, str, tuple[int, ...]]


def plan_group(plan: Plan) -> str:
    """Report label of a plan: its name, or the paper's two 3D families."""
    if plan.is_3d:
        return "3D dp+tp+pp" if plan.dp > 1 else "3D tp+pp"
    return plan.name


def row_key(model: str, row: PlacementRow) -> RowKey:
    """Identity of a measured row: model, plan name, placement."""
    return (model, row.plan.name, tuple(row.placement))


def eligible(row: PlacementRow) -> bool:
    """Whether the fit may sample ``row``: 3D plans only (see the module)."""
    return row.plan.is_3d


def sample_rows(model: str, rows: Sequence[PlacementRow],
                group_of: Callable[[PlacementRow], str] = lambda r: plan_group(r.plan),
                per_model: int = SAMPLED_PER_MODEL, seed: int = SAMPLE_SEED) -> list[PlacementRow]:
    """Up to ``per_model`` ``eligible`` rows of one model, taken in turn from its plan groups.

    ``group_of`` names a row's group (default: ``plan_group`` of its plan).
    Groups are visited in sorted order; each group's rows are shuffled by a
    generator seeded with ``seed`` and the model's name, so the sample of
    one model does not change when another model's rows do. Fewer rows than
    ``per_model`` eligible rows are all taken.
    """
    if per_model < 0:
        raise ValueError(f"per_model must be >= 0, got {per_model}")
    groups: dict[str, list[PlacementRow]] = defaultdict(list)
    for r in sorted((r for r in rows if eligible(r)), key=lambda r: (r.plan.name, r.placement)):
        groups[group_of(r)].append(r)
    rng = random.Random(f"{seed}:{model}")
    queues = []
    for name in sorted(groups):
        members = list(groups[name])
        rng.shuffle(members)
        queues.append(members)
    picked: list[PlacementRow] = []
    while len(picked) < per_model and any(queues):
        for queue in queues:
            if queue and len(picked) < per_model:
                picked.append(queue.pop(0))
    return picked


def sample_all(placements: Mapping[str, Sequence[PlacementRow]],
               group_of: Callable[[PlacementRow], str] = lambda r: plan_group(r.plan),
               per_model: int = SAMPLED_PER_MODEL, seed: int = SAMPLE_SEED) -> dict[str, list[PlacementRow]]:
    """``sample_rows`` for every model."""
    return {model: sample_rows(model, rows, group_of, per_model, seed) for model, rows in placements.items()}

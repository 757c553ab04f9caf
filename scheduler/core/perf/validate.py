"""Validation of the fitted model against the measured placements.

For every row of ``placements/<model>.csv`` the model (fitted from
``profiles/`` only) predicts the iteration time; errors are grouped per model
and plan, overall and split into single-node and multi-node placements, and
the fitted coefficients are set beside the authors' ``fitted_params.csv``.

CPU threads are not recorded in the placements; as in the profiling runs,
ZeRO-Offload rows are taken to have 4 threads per GPU process and all other
rows 1. The inter-node bandwidth is the measured default of the model's
``Env``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np

from scheduler.core.perf.catalog import CATALOG, spec_for
from scheduler.core.perf.data import PlacementRow
from scheduler.core.perf.model import Coeffs
from scheduler.core.perf.plans import Plan
from scheduler.core.perf.throughput import ThroughputModel

PAPER_AVG_RANGE = (1.9, 7.4)
PAPER_MAX = 10.4
OFFLOAD_THREADS = 4.0


@dataclass(frozen=True, slots=True)
class RowResult:
    """One measured configuration and its prediction."""

    model: str
    group: str
    plan: str
    placement: str
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        """Relative error |predicted - measured| / measured."""
        return abs(self.predicted_s - self.measured_s) / self.measured_s

    @property
    def multi_node(self) -> bool:
        return len(self.placement) > 1


@dataclass(frozen=True, slots=True)
class Stats:
    """Relative errors in percent over ``count`` rows (None when no rows)."""

    count: int
    avg_pct: float | None
    max_pct: float | None

    @staticmethod
    def of(errors: Sequence[float]) -> "Stats":
        if not errors:
            return Stats(0, None, None)
        return Stats(len(errors), 100.0 * float(np.mean(errors)), 100.0 * float(np.max(errors)))

    def within_paper(self) -> bool:
        return self.count > 0 and self.avg_pct <= PAPER_AVG_RANGE[1] and self.max_pct <= PAPER_MAX


@dataclass(frozen=True, slots=True)
class GroupResult:
    model: str
    group: str
    all: Stats
    single_node: Stats
    multi_node: Stats


@dataclass(frozen=True, slots=True)
class CoeffComparison:
    model: str
    ours: dict[str, float]
    authors: dict[str, float] | None
    borrowed: tuple[str, ...]
    forward_ms: tuple[float, float]


@dataclass(frozen=True, slots=True)
class Validation:
    rows: list[RowResult]
    groups: list[GroupResult]
    models: dict[str, Stats]
    coefficients: list[CoeffComparison]
    net_gbps: float

    def overall(self) -> Stats:
        return Stats.of([r.error for r in self.rows])


GROUP_ORDER = ("ga", "gc", "zero-dp", "zero-dp+gc", "zero-offload", "zero-offload+gc", "3D tp+pp", "3D dp+tp+pp")


def plan_group(plan: Plan) -> str:
    """Table label: the plan name, or the paper's two 3D families."""
    if plan.is_3d:
        return "3D dp+tp+pp" if plan.dp > 1 else "3D tp+pp"
    return plan.name


def predict_rows(tm: ThroughputModel, model: str, rows: Sequence[PlacementRow]) -> list[RowResult]:
    """Predictions for one model's measured rows (vectorized)."""
    queries = [
        (r.plan, r.placement,
         sum(r.placement) * (OFFLOAD_THREADS if r.plan.memory == "zero-offload" else 1.0), None)
        for r in rows
    ]
    predicted = tm.iter_times(model, queries)
    name = spec_for(model).name
    return [
        RowResult(name, plan_group(r.plan), r.plan.name, "".join(map(str, r.placement)), r.iter_s, float(p))
        for r, p in zip(rows, predicted)
    ]


def _authors_row(authors: Mapping[str, Mapping[str, float]], model: str) -> dict[str, float] | None:
    wanted = spec_for(model).authors_name.lower()
    for name, coeffs in authors.items():
        if name.strip().lower() == wanted:
            return dict(coeffs)
    return None


def validate(tm: ThroughputModel, placements: Mapping[str, Sequence[PlacementRow]],
             authors: Mapping[str, Mapping[str, float]]) -> Validation:
    """Errors per model and plan group, and the coefficient comparison."""
    rows: list[RowResult] = []
    order = list(CATALOG)
    for model in sorted(placements, key=lambda m: (order.index(spec_for(m).name), m)):
        rows.extend(predict_rows(tm, model, placements[model]))
    by_group: dict[tuple[str, str], list[RowResult]] = defaultdict(list)
    by_model: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_group[(r.model, r.group)].append(r)
        by_model[r.model].append(r.error)
    groups = [
        GroupResult(
            model, group,
            Stats.of([r.error for r in rs]),
            Stats.of([r.error for r in rs if not r.multi_node]),
            Stats.of([r.error for r in rs if r.multi_node]),
        )
        for (model, group), rs in sorted(by_group.items(), key=lambda kv: (
            [r.model for r in rows].index(kv[0][0]), GROUP_ORDER.index(kv[0][1])))
    ]
    coefficients = [
        CoeffComparison(m, tm.fit(m).coeffs.as_dict(), _authors_row(authors, m), tm.fit(m).borrowed,
                        (tm.fit(m).forward.f0, tm.fit(m).forward.f1))
        for m in dict.fromkeys(r.model for r in rows)
    ]
    env = tm.fit(rows[0].model).env if rows else None
    return Validation(rows, groups, {m: Stats.of(e) for m, e in by_model.items()}, coefficients,
                      env.net_gbps if env else float("nan"))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render_text(v: Validation) -> str:
    """The report ``python -m scheduler.perf validate`` prints."""
    out = [
        "Performance model vs measured iteration times (placements/*.csv)",
        f"fitted from profiles/ only; inter-node bandwidth {v.net_gbps:.2f} GB/s; "
        "relative error |pred - meas| / meas in %",
        "",
        f"{'model':8} {'plan':14} {'rows':>4} {'avg':>6} {'max':>6} | {'1-node':>6} {'avg':>6} {'max':>6} "
        f"| {'multi':>5} {'avg':>6} {'max':>6}",
    ]
    for g in v.groups:
        a, s, m = g.all, g.single_node, g.multi_node
        out.append(
            f"{g.model:8} {g.group:14} {a.count:4d} {_pct(a.avg_pct):>6} {_pct(a.max_pct):>6} | "
            f"{s.count:6d} {_pct(s.avg_pct):>6} {_pct(s.max_pct):>6} | "
            f"{m.count:5d} {_pct(m.avg_pct):>6} {_pct(m.max_pct):>6}"
        )
    out.append("")
    for model, st in v.models.items():
        out.append(f"{model:8} all plans: {st.count} rows, avg {_pct(st.avg_pct)} %, max {_pct(st.max_pct)} %")
    overall = v.overall()
    out.append(f"overall: {overall.count} rows, avg {_pct(overall.avg_pct)} %, max {_pct(overall.max_pct)} %")
    out.append("")
    lo, hi = PAPER_AVG_RANGE
    out.append(f"paper (arXiv 2408.08586): avg {lo}-{hi} % per model and plan, max {PAPER_MAX} %")
    for label, pick in (("all rows", lambda g: g.all), ("single-node rows", lambda g: g.single_node),
                        ("multi-node rows", lambda g: g.multi_node)):
        present = [g for g in v.groups if pick(g).count]
        inside = [g for g in present if pick(g).within_paper()]
        out.append(f"  groups within avg <= {hi} % and max <= {PAPER_MAX} % ({label}): {len(inside)} of {len(present)}")
    out.append("")
    out.append("fitted coefficients (ours) beside the authors' fitted_params.csv")
    names = Coeffs.names()
    out.append(f"{'model':8} {'source':8} " + " ".join(f"{n:>12}" for n in names))
    for c in v.coefficients:
        out.append(f"{c.model:8} {'ours':8} " + " ".join(f"{c.ours[n]:12.4g}" for n in names))
        theirs = c.authors or {}
        out.append(f"{'':8} {'authors':8} " + " ".join(
            f"{theirs[n]:12.4g}" if n in theirs else f"{'-':>12}" for n in names))
        out.append(f"{'':8} forward curve F(n) = {c.forward_ms[0]:.1f} + {c.forward_ms[1]:.1f}/n ms")
        if c.borrowed:
            out.append(f"{'':8} not identified by this model's profiles, median of the others: {', '.join(c.borrowed)}")
    return "\n".join(out) + "\n"


def to_json(v: Validation) -> dict:
    """A JSON-ready dict of everything in the report, rows included."""
    overall = v.overall()
    return {
        "net_gbps": v.net_gbps,
        "paper": {"avg_pct_range": list(PAPER_AVG_RANGE), "max_pct": PAPER_MAX},
        "overall": asdict(overall),
        "models": {m: asdict(s) for m, s in v.models.items()},
        "groups": [
            {"model": g.model, "plan": g.group, "all": asdict(g.all), "single_node": asdict(g.single_node),
             "multi_node": asdict(g.multi_node), "within_paper": g.all.within_paper()}
            for g in v.groups
        ],
        "coefficients": [
            {"model": c.model, "ours": c.ours, "authors": c.authors, "borrowed": list(c.borrowed),
             "forward_ms": {"f0": c.forward_ms[0], "f1_over_n": c.forward_ms[1]}}
            for c in v.coefficients
        ],
        "rows": [
            {"model": r.model, "plan": r.plan, "group": r.group, "placement": r.placement,
             "measured_s": r.measured_s, "predicted_s": r.predicted_s, "error_pct": 100.0 * r.error}
            for r in v.rows
        ],
    }

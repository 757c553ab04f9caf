"""Simulation results for people: the summary rows of the page and the standalone HTML report.

The report is one self-contained file, like the simulator's ``--report``: the
stored comparison figure with plotly.js inlined from the installed package, so
it opens with no network. The figure is stored once per run (as Plotly JSON)
and serves both the page and the report, so they always show the same charts.
"""

from __future__ import annotations

from django.template.loader import render_to_string

from portal.dashboard.models import SimulationRun
from portal.dashboard.staticfinders import plotly_js_path


def _get(result: dict, klass: str, group: str, key: str) -> float | None:
    return (result.get("classes", {}).get(klass, {}).get(group) or {}).get(key)


def _change(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return 100.0 * (value - base) / base


def summary_rows(results: list[dict]) -> list[dict]:
    """One row per policy with the paper's figures and their change against FIFO (or the first policy)."""
    if not results:
        return []
    baseline = next((r for r in results if r.get("policy") == "fifo"), results[0])
    rows = []
    for r in results:
        te95 = _get(r, "TE", "slowdown", "p95")
        be50 = _get(r, "BE", "slowdown", "p50")
        be95 = _get(r, "BE", "slowdown", "p95")
        rows.append({
            "policy": r["policy"],
            "baseline": r is baseline,
            "te_slowdown_p95": te95,
            "be_slowdown_p50": be50,
            "be_slowdown_p95": be95,
            "te_wait_p95_s": _get(r, "TE", "wait_seconds", "p95"),
            "be_wait_p50_s": _get(r, "BE", "wait_seconds", "p50"),
            "te_p95_change_pct": None if r is baseline else _change(te95, _get(baseline, "TE", "slowdown", "p95")),
            "be_p95_change_pct": None if r is baseline else _change(be95, _get(baseline, "BE", "slowdown", "p95")),
            "preemptions": r.get("preemptions"),
            "lost_gpu_hours": (r.get("lost_gpu_seconds") or 0.0) / 3600.0,
            "gpu_utilization": r.get("gpu_utilization"),
            "jobs": r.get("jobs"),
        })
    return rows


def render_report(run: SimulationRun) -> str:
    """The standalone HTML report of a succeeded run."""
    return render_to_string("dashboard/sim_report.html", {
        "run": run,
        "rows": summary_rows(run.results or []),
        "plotly_js": plotly_js_path().read_text(encoding="utf-8"),
        "figure": run.figure or {"data": [], "layout": {}},
    })

"""One self-contained HTML report (Plotly with plotly.js inlined: no network).

Panels: slowdown CDF per class and policy, wait percentiles per class and
policy, and GPU utilization over time per policy. Series are reduced to a few
hundred points so a report over a long trace stays small.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from scheduler.core.metrics import percentile
from scheduler.core.model import JobClass
from scheduler.sim.runner import RunResult
from scheduler.sim.table import results_table

_CDF_POINTS = 400
_UTIL_BUCKETS = 400


def cdf_points(values: Sequence[float], points: int = _CDF_POINTS) -> tuple[list[float], list[float]]:
    """(x, F(x)) of the empirical CDF, at most ``points`` evenly spaced quantiles."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return [], []
    if n <= points:
        return v, [(i + 1) / n for i in range(n)]
    qs = [100.0 * i / (points - 1) for i in range(points)]
    return [percentile(v, q) for q in qs], [q / 100.0 for q in qs]


def utilization_series(run: RunResult, buckets: int = _UTIL_BUCKETS) -> tuple[list[float], list[float]]:
    """(bucket mid time in hours, mean allocated fraction of GPUs in the bucket)."""
    times, gpus = run.sim.util_times, run.sim.util_gpus
    if not times or run.sim.total_gpus == 0:
        return [], []
    start = min(o.submit_time for o in run.sim.outcomes)
    end = max(o.completion for o in run.sim.outcomes)
    width = (end - start) / buckets if end > start else 1.0
    area = [0.0] * buckets
    for i, t0 in enumerate(times):
        t1 = times[i + 1] if i + 1 < len(times) else end
        level = gpus[i]
        if level == 0 or t1 <= t0:
            continue
        b0, b1 = int((t0 - start) / width), int((t1 - start) / width)
        for b in range(max(b0, 0), min(b1, buckets - 1) + 1):
            lo, hi = max(t0, start + b * width), min(t1, start + (b + 1) * width)
            if hi > lo:
                area[b] += level * (hi - lo)
    cap = run.sim.total_gpus * width
    return [(start + (b + 0.5) * width) / 3600.0 for b in range(buckets)], [a / cap for a in area]


def build_figure(runs: Sequence[RunResult]):
    """The Plotly figure with the four panels."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2, cols=2,
        subplot_titles=("TE slowdown CDF", "BE slowdown CDF", "Wait percentiles (s)", "GPU utilization over time"),
    )
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    for i, run in enumerate(runs):
        color = palette[i % len(palette)]
        for col, klass in ((1, JobClass.TE), (2, JobClass.BE)):
            x, y = cdf_points([o.slowdown for o in run.sim.outcomes if o.job_class is klass])
            fig.add_trace(
                go.Scatter(x=x, y=y, mode="lines", name=run.policy, legendgroup=run.policy,
                           showlegend=col == 1, line={"color": color}),
                row=1, col=col,
            )
        labels, values = [], []
        for klass in ("TE", "BE"):
            for q in ("p50", "p95"):
                labels.append(f"{klass} {q}")
                values.append(run.classes[klass].wait_seconds[q] or 0.0)
        fig.add_trace(
            go.Bar(x=labels, y=values, name=run.policy, legendgroup=run.policy, showlegend=False,
                   marker={"color": color}),
            row=2, col=1,
        )
        ux, uy = utilization_series(run)
        fig.add_trace(
            go.Scatter(x=ux, y=uy, mode="lines", name=run.policy, legendgroup=run.policy, showlegend=False,
                       line={"color": color}),
            row=2, col=2,
        )
    fig.update_xaxes(type="log", title_text="slowdown", row=1, col=1)
    fig.update_xaxes(type="log", title_text="slowdown", row=1, col=2)
    fig.update_yaxes(title_text="fraction of jobs", range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(range=[0, 1.02], row=1, col=2)
    fig.update_yaxes(type="log", title_text="seconds", row=2, col=1)
    fig.update_xaxes(title_text="hours", row=2, col=2)
    fig.update_yaxes(title_text="allocated GPUs", range=[0, 1.02], tickformat=".0%", row=2, col=2)
    fig.update_layout(height=850, barmode="group", template="plotly_white", margin={"t": 60})
    return fig


def write_report(path: str, runs: Sequence[RunResult], command: str = "") -> None:
    """Write the report; it embeds plotly.js and needs no network to open."""
    fig = build_figure(runs)
    body = fig.to_html(include_plotlyjs=True, full_html=False)
    workload = runs[0].workload_label if runs else ""
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Scheduler simulation report</title>
<style>body{{font-family:sans-serif;margin:1.5em}} pre{{background:#f6f6f6;padding:.8em;overflow-x:auto}}</style>
</head><body>
<h1>Scheduler simulation report</h1>
<p><b>Workload:</b> {html.escape(workload)}</p>
<p><b>Cluster:</b> {runs[0].sim.total_gpus if runs else 0} GPUs</p>
{f"<p><b>Command:</b> <code>{html.escape(command)}</code></p>" if command else ""}
<pre>{html.escape(results_table(runs))}</pre>
{body}
</body></html>
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)

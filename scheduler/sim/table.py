"""Plain-text result tables for the terminal and for docs/results.md."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.sim.runner import RunResult

_COLUMNS = (
    ("policy", None),
    ("TE sd p50", ("TE", "slowdown", "p50")),
    ("TE sd p95", ("TE", "slowdown", "p95")),
    ("TE sd p99", ("TE", "slowdown", "p99")),
    ("BE sd p50", ("BE", "slowdown", "p50")),
    ("BE sd p95", ("BE", "slowdown", "p95")),
    ("TE wait p95 s", ("TE", "wait_seconds", "p95")),
    ("BE wait p50 s", ("BE", "wait_seconds", "p50")),
    ("JCT mean h", ("all", "jct_seconds", "mean")),
)


def _stat(run: RunResult, path: tuple[str, str, str]) -> float | None:
    klass, group, key = path
    return getattr(run.classes[klass], group)[key]


def _fmt(value: float | None, scale: float = 1.0) -> str:
    if value is None:
        return "-"
    v = value / scale
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def results_table(runs: Sequence[RunResult]) -> str:
    """One row per policy: slowdowns, waits, JCT, preemptions, loss, utilization, makespan."""
    header = [c for c, _ in _COLUMNS] + ["preempt", "lost GPU-h", "util %", "makespan h", "wall s"]
    rows = []
    for r in runs:
        row = [r.policy]
        for name, path in _COLUMNS[1:]:
            row.append(_fmt(_stat(r, path), 3600.0 if name.endswith(" h") else 1.0))
        row += [
            str(r.preemptions),
            _fmt(r.sim.lost_gpu_seconds / 3600.0),
            f"{100 * r.gpu_utilization:.1f}",
            _fmt(r.makespan_seconds / 3600.0),
            f"{r.wall_seconds:.2f}",
        ]
        rows.append(row)
    return _render(header, rows)


def change_table(runs: Sequence[RunResult], baseline: RunResult) -> str:
    """Relative change of the paper's three figures against ``baseline`` (%)."""
    header = ["policy", "TE sd p95 change %", "BE sd p50 change %", "BE sd p95 change %"]
    rows = []
    for r in runs:
        if r is baseline:
            continue
        row = [f"{r.policy} vs {baseline.policy}"]
        for path in (("TE", "slowdown", "p95"), ("BE", "slowdown", "p50"), ("BE", "slowdown", "p95")):
            row.append(_pct(_stat(r, path), _stat(baseline, path)))
        rows.append(row)
    return _render(header, rows)


def _pct(value: float | None, base: float | None) -> str:
    if value is None or base is None or base == 0:
        return "-"
    return f"{100.0 * (value - base) / base:+.1f}"


def _render(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(len(header))]
    lines = [
        " | ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))),
        "-|-".join("-" * w for w in widths),
    ]
    for r in rows:
        lines.append(" | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)

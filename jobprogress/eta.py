"""Step rate and time to completion from a progress history (pure functions, no Django)."""

from __future__ import annotations

from collections.abc import Sequence

#: The rate is measured over the points of the last this many seconds (at least two points).
RATE_WINDOW_S = 120.0


def step_rate(points: Sequence[Sequence], window_s: float = RATE_WINDOW_S) -> float | None:
    """Steps per second over the newest ``window_s`` of ``[t, step, ...]`` points; None when unknown.

    Points without a step are ignored. A step that went back (a resumed attempt
    restarting from a checkpoint) starts the measurement again from there.
    """
    stepped = [(float(p[0]), int(p[1])) for p in points if p[1] is not None]
    if len(stepped) < 2:
        return None
    end_t, end_step = stepped[-1]
    start_t, start_step = stepped[-1]
    for t, step in reversed(stepped[:-1]):
        if end_t - t > window_s or step > start_step:
            break
        start_t, start_step = t, step
    if end_t <= start_t or end_step <= start_step:
        return None
    return (end_step - start_step) / (end_t - start_t)


def eta_seconds(step: int | None, total_steps: int | None, rate: float | None) -> float | None:
    """Seconds until ``total_steps`` at ``rate``; 0 once there, None when any is unknown."""
    if step is None or total_steps is None:
        return None
    if step >= total_steps:
        return 0.0
    if not rate:
        return None
    return (total_steps - step) / rate

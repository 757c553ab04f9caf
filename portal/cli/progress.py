"""``gpusched show``'s progress section: what the job reported through gpusched.job (docs/jobs.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from portal.cli.output import key_values, local_time, seconds


def format_progress(progress: Mapping[str, Any]) -> str:
    """``Progress:`` lines: step of total (percent), epoch, rate and ETA, latest metrics, last checkpoint."""
    step, total = progress.get("step"), progress.get("total_steps")
    where = None
    if step is not None:
        where = f"step {step}" + (f" of {total} ({100 * progress['fraction']:.1f} %)" if total else "")
    rate = progress.get("steps_per_second")
    metrics = progress.get("metrics") or {}
    checkpoint = progress.get("checkpoint")
    fields = [
        ("Attempt", progress.get("attempt")),
        ("Where", where),
        ("Epoch", None if progress.get("epoch") is None else f"{progress['epoch']:g}"),
        ("Rate", None if rate is None else f"{rate:.3g} steps/s"),
        ("ETA", seconds(progress.get("eta_seconds"))),
        *[(name, f"{value:.6g}") for name, value in sorted(metrics.items())],
        ("Checkpoint", None if not checkpoint else " ".join(
            f"{k} {v}" for k, v in (("step", checkpoint.get("step")), ("at", checkpoint.get("path"))) if v is not None)),
        ("Reported", local_time(progress.get("reported_at"))),
    ]
    return "Progress:\n" + key_values([(k, v) for k, v in fields if v is not None])

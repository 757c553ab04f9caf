"""Celery tasks of the scheduling loop: thin adapters over ``scheduler.loop``.

The periodic safety tick (``scheduler.tick``) is a task of ``cluster.tasks``:
it starts with node liveness, which lives in ``cluster``.
"""

from __future__ import annotations

from celery import shared_task

from scheduler import forecasts, loop
from scheduler.triggers import FORECAST_TASK, RUN_CYCLE_TASK


@shared_task(name=RUN_CYCLE_TASK, ignore_result=True)
def run_cycle() -> int:
    """Serve a scheduling request (debounced; see scheduler.loop). Returns cycles run here."""
    return loop.run_requested_cycles()


@shared_task(name=FORECAST_TASK, ignore_result=True)
def recompute_forecasts() -> int:
    """Recompute every pending job's start-time forecast (debounced; see scheduler.triggers).
    Returns the number of pending jobs forecast."""
    return forecasts.recompute().pending

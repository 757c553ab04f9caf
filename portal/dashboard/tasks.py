"""Celery task of the simulation page: a thin adapter around ``simulation.execute_run``."""

from __future__ import annotations

from celery import shared_task

from portal.dashboard.simulation import RUN_TASK, execute_run


@shared_task(name=RUN_TASK, ignore_result=True)
def run_simulation(run_id: int) -> str | None:
    """Run simulation ``run_id`` if it is still QUEUED; return its final state."""
    state = execute_run(int(run_id))
    return None if state is None else str(state)

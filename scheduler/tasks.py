"""Celery tasks of the scheduling loop: thin adapters over ``scheduler.loop``."""

from __future__ import annotations

from celery import shared_task

from scheduler import loop
from scheduler.triggers import RUN_CYCLE_TASK

TICK_TASK = "scheduler.tick"


@shared_task(name=RUN_CYCLE_TASK, ignore_result=True)
def run_cycle() -> int:
    """Serve a scheduling request (debounced; see scheduler.loop). Returns cycles run here."""
    return loop.run_requested_cycles()


@shared_task(name=TICK_TASK, ignore_result=True)
def tick() -> dict[str, object]:
    """Celery beat's periodic safety tick (settings.CELERY_BEAT_SCHEDULE)."""
    return loop.tick()

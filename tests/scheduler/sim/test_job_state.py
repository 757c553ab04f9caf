"""The pending queue's order: arrival time, then job id, kept by insertion and
removal whichever the order of events."""

from __future__ import annotations

import random

from scheduler.core.model import JobClass, JobSpec, PendingJob
from scheduler.sim.job_state import insert_pending, pending_key, remove_pending


def pending(job_id: str, submit: float) -> PendingJob:
    return PendingJob(JobSpec(id=job_id, job_class=JobClass.BE, num_gpus=1, submit_time=submit))


def test_insertion_keeps_arrival_then_id_order_whatever_the_order_of_insertion():
    jobs = [pending(f"j{i:02d}", float(i // 3)) for i in range(30)]
    shuffled = list(jobs)
    random.Random(7).shuffle(shuffled)
    queue: list[PendingJob] = []
    for p in shuffled:
        insert_pending(queue, p)
    assert queue == sorted(jobs, key=pending_key)


def test_removal_of_few_and_of_many_entries_keeps_the_rest_in_order():
    jobs = [pending(f"j{i:02d}", float(i)) for i in range(20)]
    for gone in (jobs[3:5], jobs[::2]):  # 2 entries (binary search), 10 entries (one pass)
        queue = list(jobs)
        remove_pending(queue, list(gone))
        assert queue == [p for p in jobs if p not in gone]

"""Jobs placed on nodes as the scheduling loop would have written them, and agent exit reports about them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from cluster import reports
from cluster.models import Gpu
from scheduler.gpu_allocation import gpu_count
from scheduler.models import Attempt, AttemptState, Job, JobState
from tests.support.live_helpers import make_user


@pytest.fixture
def owner(db) -> Any:  # noqa: ANN001
    return make_user("alice")


def placed_job(owner: Any, allocation: dict[str, list[int]], *, state: str = JobState.RUNNING, attempt: int = 1,
               grace: int = 10, started_ago: float = 100.0, **fields: Any) -> Job:
    """A job in ``state`` whose attempt ``attempt`` holds ``allocation`` (as the loop would have written it)."""
    now = timezone.now()
    gpus = gpu_count(allocation)
    job = Job.objects.create(owner=owner, name="j", command="python train.py", num_gpus=gpus, state=state,
                             attempt_count=attempt, grace_period=grace, **fields)
    att_state = AttemptState.STARTING if state == JobState.STARTING else AttemptState.RUNNING
    Attempt.objects.create(job=job, number=attempt, gpu_allocation=allocation, state=att_state,
                           started_at=now - timedelta(seconds=started_ago))
    for node, indices in allocation.items():
        assert Gpu.objects.filter(node__name=node, index__in=indices, allocated_to=None).update(allocated_to=job) == len(indices)
    return job


def exit_report(job: Job, node: str = "n1", attempt: int | None = None, **kw: Any) -> str | None:
    now = timezone.now()
    values = {"exit_code": 0, "signal": None, "ended_at": now, "notice_at": None, "checkpointed": False,
              "reason": None, "now": now, **kw}
    return reports.attempt_exited(node, job.pk, attempt or job.attempt_count, **values)

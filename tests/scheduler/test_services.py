"""Service guarantees that need real concurrency: serialized quota checks (conditional transitions:
tests/scheduler/test_transitions.py)."""

from __future__ import annotations

import pytest

from scheduler import services
from scheduler.models import Job, JobState, Quota
from tests.support.threads import run_together


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_submissions_cannot_overrun_the_pending_limit(roles) -> None:
    Quota.objects.create(user=roles.owner, max_pending_jobs=3)
    request = services.JobRequest(name="x", command="y")
    results = run_together([lambda: services.submit_job(roles.owner, request) for _ in range(8)])
    created = [r for r in results if isinstance(r, Job)]
    refused = [r for r in results if isinstance(r, services.QuotaExceeded)]
    assert (len(created), len(refused)) == (3, 5), results
    assert Job.objects.filter(state=JobState.PENDING).count() == 3

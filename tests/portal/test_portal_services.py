"""Service guarantees that need real concurrency: conditional transitions, serialized quota checks."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection

from scheduler import services, transitions
from scheduler.models import Job, JobEvent, JobState, Quota


@pytest.mark.django_db
def test_transition_moves_only_from_expected_states_and_records_one_event(roles, make_job) -> None:
    job = make_job(roles.owner)
    assert transitions.move(job.pk, expect={JobState.RUNNING}, to=JobState.COMPLETED) is False
    assert transitions.move(job.pk, expect={JobState.PENDING}, to=JobState.STARTING, reason="Scheduled",
                               message="on n1", attempt_count=1) is True
    job.refresh_from_db()
    assert (job.state, job.attempt_count) == (JobState.STARTING, 1)
    event = JobEvent.objects.filter(job=job).order_by("-id").first()
    assert (event.from_state, event.to_state, event.reason, event.message) == ("PENDING", "STARTING", "Scheduled",
                                                                               "on n1")
    assert transitions.move(job.pk + 999, expect={JobState.PENDING}, to=JobState.STARTING) is False


def run_together(workers: list[Callable[[], object]]) -> list[object]:
    """Run callables in threads released at the same moment; each closes its own connection."""
    barrier = threading.Barrier(len(workers))
    results: list[object] = [None] * len(workers)

    def wrap(i: int, work: Callable[[], object]) -> None:
        try:
            barrier.wait()
            results[i] = work()
        except Exception as exc:  # noqa: BLE001 - the test inspects what each worker got
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=wrap, args=(i, w)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


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


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_transitions_from_one_state_succeed_once(roles, make_job) -> None:
    job = make_job(roles.owner)
    targets = [JobState.STARTING, JobState.CANCELLED] * 4
    results = run_together([lambda t=t: transitions.move(job.pk, expect={JobState.PENDING}, to=t)
                            for t in targets])
    assert results.count(True) == 1 and results.count(False) == 7
    assert JobEvent.objects.filter(job=job, from_state=JobState.PENDING).count() == 1

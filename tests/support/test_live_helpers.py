"""The shared test helpers of tests/support/live_helpers.py that judge the live system's database."""

from __future__ import annotations

import threading

import pytest

from tests.support.live_helpers import allocation_problems, make_node, make_user, submit

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_allocation_problems_reads_one_snapshot_while_another_process_commits():
    """A start committed by someone else between the checker's first read and its next ones (as a live
    worker's may be) is seen either whole or not at all, never as a job without its GPUs."""
    from django.db import connection, connections, transaction

    from cluster.models import Gpu
    from scheduler.models import Attempt, AttemptState, Job, JobState

    make_node("n1", 1)
    job = submit(make_user("alice"), "racing")

    def start_elsewhere() -> None:
        try:
            with transaction.atomic():
                Job.objects.filter(pk=job.pk).update(state=JobState.STARTING, attempt_count=1)
                Gpu.objects.filter(node__name="n1", index=0).update(allocated_to=job.pk)
                Attempt.objects.create(job_id=job.pk, number=1, gpu_allocation={"n1": [0]}, state=AttemptState.STARTING)
        finally:
            connections.close_all()

    fired: list[str] = []

    def commit_after_first_select(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        result = execute(sql, params, many, context)
        if not fired and sql.lstrip().upper().startswith("SELECT"):
            fired.append(sql)
            writer = threading.Thread(target=start_elsewhere)
            writer.start()
            writer.join()
        return result

    with connection.execute_wrapper(commit_after_first_select):
        problems = allocation_problems()
    assert fired, "the checker made no query"
    assert problems == []
    # The start did commit, and read afresh it is consistent too.
    assert Job.objects.get(pk=job.pk).attempt_count == 1
    assert allocation_problems() == []

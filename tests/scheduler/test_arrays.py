"""Array tasks are found by ID_INDEX among the jobs a user may see; an array's id cancels every unfinished task."""

from __future__ import annotations

import pytest

from scheduler import arrays, services
from scheduler.models import Job, JobState

pytestmark = pytest.mark.django_db


def make_array(owner, indices=(1, 3, 5)):  # noqa: ANN001, ANN201
    reqs = [services.JobRequest(name=f"t_{i}", command="true") for i in indices]
    return services.submit_jobs(owner, reqs, list(indices))


def test_tasks_share_the_first_tasks_id_and_keep_their_index(roles) -> None:
    jobs = make_array(roles.owner)
    assert [(j.array_id, j.array_index) for j in Job.objects.order_by("pk")] == [
        (jobs[0].pk, 1), (jobs[0].pk, 3), (jobs[0].pk, 5)]


def test_a_task_is_found_only_by_who_may_see_it(roles) -> None:
    jobs = make_array(roles.owner)
    name = f"{jobs[0].pk}_3"
    assert arrays.visible_task_id(roles.owner, name) == jobs[1].pk
    assert arrays.visible_task_id(roles.staff, name) == jobs[1].pk
    assert arrays.visible_task_id(roles.other, name) is None
    assert arrays.visible_task_id(roles.owner, f"{jobs[0].pk}_4") is None
    assert arrays.visible_task_id(roles.owner, str(jobs[2].pk)) == jobs[2].pk  # a plain id is the job itself
    for hostile in ("", "1_", "_1", "1_2_3", "1 OR 1=1", "９"):
        assert arrays.visible_task_id(roles.owner, hostile) is None


def test_cancelling_the_array_id_cancels_every_unfinished_task_and_a_task_alone_itself(roles) -> None:
    jobs = make_array(roles.owner)
    assert [j.pk for j in arrays.cancel_array(jobs[1], roles.owner)] == [jobs[1].pk]
    assert Job.objects.get(pk=jobs[2].pk).state == JobState.PENDING
    cancelled = arrays.cancel_array(jobs[0], roles.owner)
    assert [j.pk for j in cancelled] == [jobs[0].pk, jobs[2].pk]  # the task already cancelled is left alone
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.CANCELLED}
    with pytest.raises(services.JobNotCancellable):
        arrays.cancel_array(jobs[0], roles.owner)


def test_a_single_job_is_cancelled_as_before(roles) -> None:
    job = services.submit_job(roles.owner, services.JobRequest(name="one", command="true"))
    assert [j.state for j in arrays.cancel_array(job, roles.owner)] == [JobState.CANCELLED]


def test_an_array_runs_at_most_its_limit_of_tasks_at_once(roles, nodes, sent, django_capture_on_commit_callbacks):
    from scheduler import loop
    from tests.scheduler.test_dependencies import end

    nodes(("n1", 4))
    reqs = [services.JobRequest(name=f"t{i}", command="true", grace_period=10) for i in range(3)]
    jobs = services.submit_jobs(roles.owner, reqs, None, max_running=2)
    with django_capture_on_commit_callbacks(execute=True):
        assert loop.run_cycle().applied.started == [jobs[0].pk, jobs[1].pk]
    last = Job.objects.get(pk=jobs[2].pk)
    assert (last.state, last.pending_reason) == (JobState.PENDING, "JobArrayTaskLimit")
    assert last.pending_message == f"array {jobs[0].pk} runs 2 tasks at once"
    end(Job.objects.get(pk=jobs[0].pk), JobState.COMPLETED)
    with django_capture_on_commit_callbacks(execute=True):
        assert loop.run_cycle().applied.started == [jobs[2].pk]

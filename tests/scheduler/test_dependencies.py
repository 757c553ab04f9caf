"""Dependencies on the live cluster: checked at submission (same user or project, no cycle), held with the
reason Dependency by the loop, released when satisfied, cancelled with DependencyNeverSatisfied otherwise."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler import dependencies, loop, services
from scheduler.core.dependencies import render
from scheduler.models import Job, JobEvent, JobState
from scheduler.projects import Membership, Project
from scheduler.transitions import move
from tests.support.live_helpers import make_user, submit

pytestmark = pytest.mark.django_db


def cycle(capture):  # noqa: ANN001, ANN201
    with capture(execute=True):
        return loop.run_cycle()


def end(job: Job, state: str) -> None:
    """Finish a job as a report would (PENDING -> STARTING -> state)."""
    now = timezone.now()
    if job.state == JobState.PENDING:
        move(job.pk, expect={JobState.PENDING}, to=JobState.STARTING, at=now)
    move(job.pk, expect={JobState.STARTING, JobState.RUNNING}, to=state, at=now, ended_at=now)


def test_submission_stores_the_canonical_dependency(alice) -> None:
    a, b = submit(alice, "a"), submit(alice, "b")
    job = submit(alice, "c", dependency=f" AfterOK:{a.pk}:{a.pk} , afterany:{b.pk}")
    job.refresh_from_db()
    assert job.dependency == f"afterok:{a.pk},afterany:{b.pk}"


@pytest.mark.parametrize("text, fragment", [
    ("afterok:999999", "no job 999999 of yours or of this job's project"),
    ("after:1", "unknown dependency type"),
    ("afterok:abc", "'abc' is not a job id"),
    ("afterok:1'; DROP TABLE scheduler_job;--", "is not one"),
    ("afterok:" + "9" * 30, "is not a job id"),
])
def test_bad_dependencies_are_refused_under_the_field_and_nothing_is_written(alice, text, fragment) -> None:
    before = Job.objects.count()
    with pytest.raises(services.JobRequestInvalid) as refused:
        submit(alice, "x", dependency=text)
    assert list(refused.value.errors) == ["dependency"] and fragment in refused.value.errors["dependency"][0]
    assert Job.objects.count() == before


def test_another_users_job_reads_as_no_job_but_a_project_mates_is_allowed(alice) -> None:
    bob = make_user("bob")
    theirs = submit(bob, "theirs")
    with pytest.raises(services.JobRequestInvalid) as refused:
        submit(alice, "mine", dependency=f"afterok:{theirs.pk}")
    assert refused.value.errors["dependency"] == [f"no job {theirs.pk} of yours or of this job's project"]
    team = Project.objects.create(name="team")
    Membership.objects.create(project=team, user=alice, is_default=True)
    Membership.objects.create(project=team, user=bob, is_default=True)
    shared = submit(bob, "shared")  # charged to team
    assert submit(alice, "after-shared", dependency=f"afterok:{shared.pk}").dependency == f"afterok:{shared.pk}"
    with pytest.raises(services.JobRequestInvalid):
        submit(alice, "still-not", dependency=f"afterok:{theirs.pk}")  # bob's job outside the project


def test_a_cycle_is_refused_naming_it(alice) -> None:
    a = submit(alice, "a")
    b = submit(alice, "b", dependency=f"afterok:{a.pk}")
    Job.objects.filter(pk=a.pk).update(dependency=f"afterany:{b.pk}")  # as if a had been changed to wait for b
    b.refresh_from_db()
    assert dependencies.refuse_cycle(b) in (f"dependency cycle: {b.pk} -> {a.pk} -> {b.pk}",)
    a.refresh_from_db()
    assert dependencies.refuse_cycle(Job(pk=None, dependency="")) == ""


def test_the_loop_holds_a_dependent_job_then_starts_it(alice, nodes, sent, django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 4))
    first = submit(alice, "first")
    second = submit(alice, "second", dependency=f"afterok:{first.pk}")
    assert cycle(django_capture_on_commit_callbacks).applied.started == [first.pk]
    second.refresh_from_db()
    assert (second.state, second.pending_reason) == (JobState.PENDING, "Dependency")
    assert second.pending_message == f"waiting for job {first.pk} to end"
    first.refresh_from_db()
    end(first, JobState.COMPLETED)
    assert cycle(django_capture_on_commit_callbacks).applied.started == [second.pk]


@pytest.mark.parametrize("kind, outcome, cancelled", [
    ("afterok", JobState.FAILED, True),
    ("afterok", JobState.CANCELLED, True),
    ("afternotok", JobState.COMPLETED, True),
    ("afternotok", JobState.TIMEOUT, False),
    ("afterany", JobState.FAILED, False),
])
def test_a_dependency_that_can_never_hold_cancels_the_job(alice, nodes, sent, django_capture_on_commit_callbacks,
                                                            kind, outcome, cancelled) -> None:
    nodes(("n1", 4))
    first = submit(alice, "first")
    waiting = submit(alice, "waiting", dependency=f"{kind}:{first.pk}")
    end(first, outcome)
    report = cycle(django_capture_on_commit_callbacks)
    waiting.refresh_from_db()
    if cancelled:
        assert waiting.state == JobState.CANCELLED and report.applied.started == []
        event = JobEvent.objects.get(job=waiting, to_state=JobState.CANCELLED)
        assert event.reason == "DependencyNeverSatisfied" and f"{kind}:{first.pk}" in event.message
    else:
        assert waiting.state == JobState.STARTING and report.applied.started == [waiting.pk]


def test_evaluate_reads_every_state_in_one_query(alice, django_assert_num_queries) -> None:
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    pairs = [(100 + i, f"afterok:{job.pk}") for i, job in enumerate(jobs)]
    with django_assert_num_queries(1):
        held, never, awaited = dependencies.evaluate(pairs)
    assert set(held) == {100, 101, 102} and never == {}
    assert {pk: render(clauses) for pk, clauses in awaited.items()} == {
        100 + i: f"afterok:{job.pk}" for i, job in enumerate(jobs)}


def test_an_array_id_stands_for_every_task_of_the_array(alice) -> None:
    tasks = services.submit_jobs(alice, [services.JobRequest(name=f"t{i}", command="true") for i in range(3)])
    job = submit(alice, "after-array", dependency=f"afterok:{tasks[0].pk}")
    assert job.dependency == "afterok:" + ":".join(str(t.pk) for t in tasks)


def test_a_dependency_that_expands_past_the_stored_length_is_refused(alice) -> None:
    tasks = services.submit_jobs(alice, [services.JobRequest(name=f"t{i}", command="true") for i in range(300)])
    with pytest.raises(services.JobRequestInvalid) as refused:
        submit(alice, "after-big-array", dependency=f"afterok:{tasks[0].pk}")
    assert "names too many jobs" in refused.value.errors["dependency"][0]

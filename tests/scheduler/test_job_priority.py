"""Changing a waiting job's priority: the ranges of submission for its owner, the global range for
staff on another user's job, only while PENDING, and the next cycle starting jobs in the new order."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster.models import Node
from scheduler import job_priority
from scheduler.models import Job, JobEvent, JobState, Quota
from scheduler.projects import Project
from tests.support.live_helpers import make_node, run_cycle, submit

pytestmark = pytest.mark.django_db


def test_the_owner_changes_the_priority_and_the_timeline_says_so(alice) -> None:
    job = submit(alice, "wait")
    changed = job_priority.change_priority(job, alice, 5)
    assert changed.priority == 5 and Job.objects.get(pk=job.pk).priority == 5
    assert list(JobEvent.objects.filter(job=job, reason="PriorityChanged").values_list("message", "to_state")) == [
        ("priority 0 -> 5 by alice", "PENDING")]
    job_priority.change_priority(job, alice, 5)  # the same again: no second event
    assert JobEvent.objects.filter(job=job, reason="PriorityChanged").count() == 1


def test_the_owner_is_held_to_the_quota_s_and_the_project_s_range_and_nothing_changes(alice) -> None:
    Quota.objects.create(user=alice, max_priority=10)
    job = submit(alice, "wait")
    with pytest.raises(job_priority.PriorityRefused, match=r"Must be between -1000 and 10 \(quota of user alice\)") as e:
        job_priority.change_priority(job, alice, 11)
    assert not e.value.conflict
    project = Project.objects.create(name="vision", min_priority=-5)
    Job.objects.filter(pk=job.pk).update(project=project)
    with pytest.raises(job_priority.PriorityRefused, match="At least -5 for jobs of project vision"):
        job_priority.change_priority(job, alice, -6)
    assert Job.objects.get(pk=job.pk).priority == 0
    assert not JobEvent.objects.filter(job=job, reason="PriorityChanged").exists()


def test_staff_set_another_s_job_anywhere_in_the_global_range_only(alice, staff) -> None:
    Quota.objects.create(user=alice, max_priority=10)
    job = submit(alice, "wait")
    assert job_priority.change_priority(job, staff, 500).priority == 500
    with pytest.raises(job_priority.PriorityRefused, match="Must be between -1000 and 1000"):
        job_priority.change_priority(job, staff, 1001)


def test_only_a_waiting_job_s_priority_changes(alice) -> None:
    job = submit(alice, "ran")
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    with pytest.raises(job_priority.PriorityRefused, match=f"job {job.pk} is RUNNING") as e:
        job_priority.change_priority(job, alice, 5)
    assert e.value.conflict and Job.objects.get(pk=job.pk).priority == 0


def test_the_cycle_after_a_change_starts_the_raised_job_first(alice, sent, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1, state="DOWN")
    first, second = submit(alice, "first"), submit(alice, "second")
    run_cycle(django_capture_on_commit_callbacks)  # nowhere to start: both rows are kept for the next cycle
    job_priority.change_priority(second, alice, 10)
    Node.objects.update(state="UP", last_heartbeat=timezone.now())
    report = run_cycle(django_capture_on_commit_callbacks)
    assert report.applied.started == [second.pk]
    assert Job.objects.get(pk=first.pk).state == JobState.PENDING

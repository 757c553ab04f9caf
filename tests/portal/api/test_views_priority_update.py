"""``PATCH /api/v1/jobs/{id}/`` with a new priority: its answers, the refusals naming the field,
and the audit of staff changing another user's job."""

from __future__ import annotations

import pytest

from audit.models import AuditEntry
from scheduler.models import Job, Quota

pytestmark = pytest.mark.django_db


def test_the_owner_raises_a_waiting_job_s_priority(roles, api_as, make_job) -> None:
    job = make_job(roles.owner)
    response = api_as(roles.owner).patch(f"/api/v1/jobs/{job.pk}/", {"priority": 7}, format="json")
    assert response.status_code == 200 and response.json()["priority"] == 7
    assert response.json()["events"][-1]["reason"] == "PriorityChanged"
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("body, errors", [
    ({"priority": 11}, {"priority": ["Must be between -1000 and 10 (quota of user alice)."]}),
    ({"priority": "high"}, {"priority": ["A valid integer is required."]}),
    ({}, {"priority": ["This field is required."]}),
    ({"priority": 1, "num_gpus": 8, "command": "rm -rf /"}, {"command": ["Cannot be changed after submission."],
                                                           "num_gpus": ["Cannot be changed after submission."]}),
    ({"name": "renamed"}, {"name": ["Cannot be changed after submission."], "priority": ["This field is required."]}),
    ({"priority": "high", "hold": "user"}, {"hold": ["Cannot be changed after submission."],
                                           "priority": ["A valid integer is required."]}),
])
def test_bad_updates_are_refused_naming_the_field_and_nothing_changes(roles, api_as, make_job, body, errors) -> None:
    Quota.objects.create(user=roles.owner, max_priority=10)
    job = make_job(roles.owner)
    response = api_as(roles.owner).patch(f"/api/v1/jobs/{job.pk}/", body, format="json")
    assert (response.status_code, response.json()) == (400, {"errors": errors})
    stored = Job.objects.get(pk=job.pk)
    assert (stored.priority, stored.num_gpus, stored.command) == (job.priority, job.num_gpus, job.command)


def test_a_running_job_is_a_conflict(roles, api_as, make_job) -> None:
    job = make_job(roles.owner, state="RUNNING")
    response = api_as(roles.owner).patch(f"/api/v1/jobs/{job.pk}/", {"priority": 3}, format="json")
    assert response.status_code == 409 and response.json()["state"] == "RUNNING"


def test_staff_changing_another_s_job_is_audited(roles, api_as, make_job) -> None:
    job = make_job(roles.owner)
    assert api_as(roles.staff).patch(f"/api/v1/jobs/{job.pk}/", {"priority": 900}, format="json").status_code == 200
    assert list(AuditEntry.objects.values_list("action", "detail")) == [("job.priority-by-staff", "priority now 900")]

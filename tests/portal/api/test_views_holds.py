"""``POST /api/v1/jobs/{id}/hold/`` and ``/release/``: the answers, the refusals (409 for a job that is not
waiting, 403 for an administrator's hold released by its owner), arrays, and the staff audit."""

from __future__ import annotations

import pytest

from audit.models import AuditEntry
from scheduler.models import Job, JobState

pytestmark = pytest.mark.django_db


def test_the_owner_holds_and_releases_and_the_job_says_so(roles, api_as, make_job) -> None:
    job = make_job(roles.owner)
    client = api_as(roles.owner)
    body = client.post(f"/api/v1/jobs/{job.pk}/hold/").json()
    assert (body["hold"], body["state"], body["pending_reason"]) == ("user", "PENDING", "JobHeldUser")
    assert body["events"][-1]["reason"] == "JobHeldUser"
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["hold"] == "user"
    released = client.post(f"/api/v1/jobs/{job.pk}/release/")
    assert released.status_code == 200 and released.json()["hold"] == ""
    assert not AuditEntry.objects.exists()  # an owner's own job: nothing to audit


def test_a_running_job_is_a_conflict_and_stays_as_it_was(roles, api_as, make_job) -> None:
    job = make_job(roles.owner, state="RUNNING")
    response = api_as(roles.owner).post(f"/api/v1/jobs/{job.pk}/hold/")
    assert response.status_code == 409
    assert response.json() == {"detail": f"job {job.pk} is RUNNING: only a PENDING job can be held", "state": "RUNNING"}
    assert Job.objects.get(pk=job.pk).hold == ""


def test_staff_hold_another_s_job_which_its_owner_cannot_release_and_it_is_audited(roles, api_as, make_job) -> None:
    job = make_job(roles.owner)
    assert api_as(roles.staff).post(f"/api/v1/jobs/{job.pk}/hold/").json()["hold"] == "admin"
    refused = api_as(roles.owner).post(f"/api/v1/jobs/{job.pk}/release/")
    assert refused.status_code == 403
    assert refused.json()["detail"] == f"job {job.pk} is held by an administrator: only staff release it"
    assert Job.objects.get(pk=job.pk).hold == "admin"
    assert api_as(roles.staff).post(f"/api/v1/jobs/{job.pk}/release/").json()["hold"] == ""
    assert list(AuditEntry.objects.order_by("id").values_list("action", "target")) == [
        ("job.held-by-staff", f"job {job.pk} of {roles.owner.username}"),
        ("job.released-by-staff", f"job {job.pk} of {roles.owner.username}"),
    ]


def test_an_array_s_id_holds_its_waiting_tasks(roles, api_as) -> None:
    client = api_as(roles.owner)
    jobs = client.post("/api/v1/jobs/array/", {"jobs": [{"name": f"t{i}", "command": "echo"} for i in range(3)]},
                       format="json").json()["jobs"]
    Job.objects.filter(pk=jobs[1]["id"]).update(state=JobState.RUNNING)
    assert client.post(f"/api/v1/jobs/{jobs[0]['id']}/hold/").status_code == 200
    assert dict(Job.objects.values_list("pk", "hold")) == {jobs[0]["id"]: "user", jobs[1]["id"]: "", jobs[2]["id"]: "user"}
    task = f"{jobs[0]['id']}_2"  # a task by its ID_INDEX
    assert client.post(f"/api/v1/jobs/{task}/release/").json()["id"] == jobs[2]["id"]
    assert Job.objects.get(pk=jobs[2]["id"]).hold == ""

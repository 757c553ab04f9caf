"""GET /api/v1/usage/ and /api/v1/usage/csv/: who sees which projects, and bad queries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import Attempt, AttemptState, Job, JobState
from scheduler.projects import Membership, Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def charged(roles):  # noqa: ANN001, ANN201
    """A 2-GPU hour on project vision (alice's) and a 1-GPU hour on project nlp (nobody of the roles)."""
    from django.contrib.auth.models import User

    vision, nlp = Project.objects.create(name="vision"), Project.objects.create(name="nlp")
    Membership.objects.create(project=vision, user=roles.owner)
    dana = User.objects.create_user("dana")
    Membership.objects.create(project=nlp, user=dana)
    end = timezone.now() - timedelta(hours=1)
    for owner, project, gpus in ((roles.owner, vision, 2), (dana, nlp, 1)):
        job = Job.objects.create(owner=owner, project=project, name="j", command="x", num_gpus=gpus,
                                 state=JobState.COMPLETED, submitted_at=end - timedelta(hours=1))
        Attempt.objects.create(job=job, number=1, gpu_allocation={"n1": list(range(gpus))},
                               state=AttemptState.COMPLETED, started_at=end - timedelta(hours=1), ended_at=end)
    return vision, nlp


@pytest.mark.parametrize("role, projects", [("owner", {"vision"}), ("other", set()), ("staff", {"vision", "nlp"})])
def test_each_role_sees_only_its_projects(roles, api_as, charged, role, projects):
    body = api_as(getattr(roles, role)).get("/api/v1/usage/").json()
    assert {r["project"] for r in body["rows"]} == projects
    if "vision" in projects:
        assert next(r for r in body["rows"] if r["project"] == "vision")["gpu_hours"] == pytest.approx(2.0)


def test_anonymous_is_refused(api_as, charged):
    assert api_as(None).get("/api/v1/usage/").status_code == 401
    assert api_as(None).get("/api/v1/usage/csv/").status_code == 401


def test_csv_download_has_the_rows_the_caller_may_see(roles, api_as, charged):
    response = api_as(roles.owner).get("/api/v1/usage/csv/", {"by": "user"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="usage-by-user-')
    lines = response.content.decode().splitlines()
    assert lines[0] == "user,job_class,gpu_hours,jobs,preemptions,lost_gpu_hours"
    assert [line.split(",")[0] for line in lines[1:]] == ["alice"]


@pytest.mark.parametrize("path", ["/api/v1/usage/", "/api/v1/usage/csv/"])
def test_bad_parameters_are_named(roles, api_as, path):
    response = api_as(roles.owner).get(path, {"from": "not-a-date", "by": "nope"})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"from", "by"}

"""GET /api/v1/jobs/{id}/progress/: the owner and staff read it; another user gets 404, anonymous 401."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobprogress import services

pytestmark = pytest.mark.django_db


@pytest.fixture
def reported(roles, make_job):  # noqa: ANN001
    job = make_job(roles.owner, "RUNNING")
    services.record_progress(job.pk, 1, {"t": 10.0, "step": 5, "total_steps": 10, "metrics": {"loss": 0.4}},
                             timezone.now())
    return job


@pytest.mark.parametrize("role, status", [("owner", 200), ("staff", 200), ("other", 404), (None, 401)])
def test_progress_permissions(roles, api_as, reported, role, status) -> None:
    response = api_as(getattr(roles, role) if role else None).get(f"/api/v1/jobs/{reported.pk}/progress/")
    assert response.status_code == status
    if status == 200:
        body = response.json()
        assert body["job"] == reported.pk
        assert (body["progress"]["step"], body["progress"]["fraction"], body["progress"]["metrics"]) == (5, 0.5, {"loss": 0.4})
    else:
        assert "progress" not in response.json()


def test_a_job_that_reported_nothing_has_null_progress(roles, api_as, make_job) -> None:
    job = make_job(roles.owner, "RUNNING")
    assert api_as(roles.owner).get(f"/api/v1/jobs/{job.pk}/progress/").json() == {"job": job.pk, "progress": None}

"""POST /api/v1/sessions/ and GET /api/v1/sessions/{id}/: permission matrix, bad input, no secret."""

from __future__ import annotations

import pytest

from scheduler.models import Job, JobState
from tests.support.session_server import SECRET

pytestmark = pytest.mark.django_db


def test_anonymous_cannot_start_or_read(api_as, roles, make_session) -> None:  # noqa: ANN001
    job = make_session(roles.owner, 1)
    assert api_as(None).post("/api/v1/sessions/", {"kind": "jupyter"}, format="json").status_code == 401
    assert api_as(None).get(f"/api/v1/sessions/{job.pk}/").status_code == 401
    assert Job.objects.count() == 1


def test_starting_a_session_answers_its_status(api_as, roles) -> None:  # noqa: ANN001
    response = api_as(roles.owner).post("/api/v1/sessions/", {"kind": "terminal", "num_gpus": 1, "time_limit": 600},
                                        format="json")
    assert response.status_code == 201
    body = response.json()
    job = Job.objects.get(pk=body["job"])
    assert (body["kind"], body["phase"], body["url"]) == ("terminal", "queued", None)
    assert (job.session_kind, job.job_class, job.time_limit) == ("terminal", "TE", 600)


@pytest.mark.parametrize("body,field", [({"kind": "vnc"}, "kind"), ({"num_gpus": 0}, "num_gpus"), ({"num_gpus": "2"}, "num_gpus"),
                                        ({"time_limit": 10}, "time_limit"), ({"image": "nope"}, "image")])
def test_bad_input_names_the_field_and_writes_nothing(api_as, roles, body, field) -> None:  # noqa: ANN001
    response = api_as(roles.owner).post("/api/v1/sessions/", body, format="json")
    assert response.status_code == 400 and field in response.json()["errors"]
    assert not Job.objects.exists()


@pytest.mark.parametrize("who,status", [("other", 404), ("owner", 200), ("staff", 200)])
def test_status_permission_matrix(api_as, roles, make_session, who, status) -> None:  # noqa: ANN001
    job = make_session(roles.owner, 1)
    response = api_as(getattr(roles, who)).get(f"/api/v1/sessions/{job.pk}/")
    assert response.status_code == status and SECRET not in response.content.decode()
    if status == 200:
        assert response.json()["phase"] == "ready" and response.json()["url"] == f"/sessions/{job.pk}/lab"


def test_a_batch_job_and_a_forged_id_are_404(api_as, roles, make_job) -> None:  # noqa: ANN001
    job = make_job(roles.owner, state=JobState.RUNNING)
    assert api_as(roles.owner).get(f"/api/v1/sessions/{job.pk}/").status_code == 404
    assert api_as(roles.owner).get("/api/v1/sessions/999999/").status_code == 404

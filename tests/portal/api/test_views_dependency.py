"""The ``dependency`` field through the API, the form, the job page and ``gpusched submit --dependency``:
a user may wait only for their own jobs (another user's job is no job), bad text is refused naming the field."""

from __future__ import annotations

import pytest

from scheduler.models import Job

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"
BODY = {"name": "train", "command": "python train.py"}


def test_the_api_takes_and_shows_the_dependency(roles, api_as):
    client = api_as(roles.owner)
    first = client.post(URL, BODY, format="json").json()["id"]
    response = client.post(URL, {**BODY, "dependency": f"afterok:{first}"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["dependency"] == f"afterok:{first}"
    assert client.get(f"{URL}{response.json()['id']}/").json()["dependency"] == f"afterok:{first}"


@pytest.mark.parametrize("role", ["other", "staff"])
def test_no_one_may_wait_for_another_users_job_not_even_staff(roles, api_as, role):
    mine = api_as(roles.owner).post(URL, BODY, format="json").json()["id"]
    response = api_as(getattr(roles, role)).post(URL, {**BODY, "dependency": f"afterok:{mine}"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"dependency": [f"no job {mine} of yours or of this job's project"]}
    assert Job.objects.count() == 1


@pytest.mark.parametrize("value", ["afterok:<img src=x>", "x" * 1001, 12, ["afterok:1"], "afterok:" + "1:" * 200])
def test_hostile_values_are_refused_naming_the_field(roles, api_as, value):
    response = api_as(roles.owner).post(URL, {**BODY, "dependency": value}, format="json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["dependency"]
    assert not Job.objects.exists()


def test_anonymous_cannot_submit_with_a_dependency(client):
    response = client.post(URL, {**BODY, "dependency": "afterok:1"}, content_type="application/json")
    assert response.status_code in (401, 403)
    assert not Job.objects.exists()


def test_the_form_and_the_job_page_carry_the_dependency(roles, browser_as):
    client = browser_as(roles.owner)
    first = Job.objects.create(owner=roles.owner, name="a", command="true", num_gpus=1)
    response = client.post("/jobs/new/", {"name": "b", "command": "true", "job_class": "BE", "num_gpus": 1,
                                          "dependency": f"afterany:{first.pk}"})
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get(name="b")
    assert job.dependency == f"afterany:{first.pk}"
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'<dd id="dependency">afterany:{first.pk}</dd>' in page
    refused = client.post("/jobs/new/", {"name": "c", "command": "true", "job_class": "BE", "num_gpus": 1,
                                         "dependency": "afterok:nope"})
    assert refused.status_code == 400 and "is not a job id" in refused.content.decode()
    assert not Job.objects.filter(name="c").exists()

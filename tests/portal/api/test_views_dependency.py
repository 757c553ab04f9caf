"""The ``dependency`` field through the API, the form, the job page and ``gpusched submit --dependency``:
a user may wait only for their own jobs (another user's job is no job), bad text is refused naming the field."""

from __future__ import annotations

import pytest

from scheduler import services
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


ARRAY_URL = "/api/v1/jobs/array/"


def test_an_array_spec_expands_one_template_and_tasks_are_addressed_as_id_index(roles, api_as):
    client = api_as(roles.owner)
    response = client.post(ARRAY_URL, {"array": "0-6:3", "jobs": [{**BODY, "command": "run %a"}]}, format="json")
    assert response.status_code == 201, response.content
    jobs = response.json()["jobs"]
    array = jobs[0]["id"]
    assert [(j["array_id"], j["array_index"], j["command"]) for j in jobs] == [
        (array, i, f"run {i}") for i in (0, 3, 6)]
    assert client.get(f"{URL}{array}_6/").json()["id"] == jobs[2]["id"]
    assert api_as(roles.other).get(f"{URL}{array}_6/").status_code == 404
    assert api_as(roles.other).post(f"{URL}{array}/cancel/").status_code == 404
    assert api_as(roles.staff).get(f"{URL}{array}_6/").status_code == 200
    assert client.post(f"{URL}{array}/cancel/").status_code == 202
    assert set(Job.objects.values_list("state", flat=True)) == {"CANCELLED"}


@pytest.mark.parametrize("array", ["9-0", "0-100000", "0-9%0", "0-9%x", 7, None, ["0-1"], "<b>", "0-9:0"])
def test_bad_array_specs_are_refused_naming_array(roles, api_as, array):
    response = api_as(roles.owner).post(ARRAY_URL, {"array": array, "jobs": [BODY]}, format="json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["array"]
    assert not Job.objects.exists()


def test_an_array_spec_needs_exactly_one_template(roles, api_as):
    response = api_as(roles.owner).post(ARRAY_URL, {"array": "0-1", "jobs": [BODY, BODY]}, format="json")
    assert response.status_code == 400 and list(response.json()["errors"]) == ["array"]


def test_the_array_task_page_redirects_for_who_may_see_it(roles, browser_as, client):
    jobs = services.submit_jobs(roles.owner, [services.JobRequest(name=f"t{i}", command="true") for i in (2, 4)], [2, 4])
    url = f"/jobs/{jobs[0].pk}_4/"
    assert client.get(url).status_code == 302 and "/login" in client.get(url)["Location"]  # anonymous: log in first
    assert browser_as(roles.other).get(url).status_code == 404
    for role in ("owner", "staff"):
        response = browser_as(getattr(roles, role)).get(url)
        assert response.status_code == 302 and response["Location"] == f"/jobs/{jobs[1].pk}/"
    page = browser_as(roles.owner).get(f"/jobs/{jobs[1].pk}/").content.decode()
    assert f">{jobs[0].pk}</a>_4</dd>" in page


def test_the_job_list_shows_an_array_expanded_or_as_one_row(roles, browser_as):
    jobs = services.submit_jobs(roles.owner, [services.JobRequest(name=f"t{i}", command="true") for i in (0, 1, 2)])
    single = services.submit_job(roles.owner, services.JobRequest(name="single", command="true"))
    client = browser_as(roles.owner)
    expanded = client.get("/jobs/").content.decode()
    assert all(f">{jobs[0].pk}_{i}</a>" in expanded for i in (0, 1, 2)) and f">{single.pk}</a>" in expanded
    collapsed = client.get("/jobs/?arrays=collapsed").content.decode()
    assert f">{jobs[0].pk}_[3 tasks]</a>" in collapsed and f">{single.pk}</a>" in collapsed
    assert f">{jobs[0].pk}_1</a>" not in collapsed
    assert f"{jobs[0].pk}_[" not in browser_as(roles.other).get("/jobs/?arrays=collapsed").content.decode()
    assert client.get("/jobs/?arrays=<script>").status_code == 200  # an unknown value is ignored, as other filters


def test_an_array_limit_is_stored_on_every_task(roles, api_as):
    response = api_as(roles.owner).post(ARRAY_URL, {"array": "0-3%2", "jobs": [BODY]}, format="json")
    assert response.status_code == 201, response.content
    assert list(Job.objects.values_list("array_max_running", flat=True)) == [2, 2, 2, 2]

"""Projects: which project a job is charged to, refusals naming the field ``project``, per-project
priority ranges, and users without a project who submit as before."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from scheduler.models import Job
from scheduler.projects import Membership, Project, names_of, priority_problem, resolve

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"
BODY = {"name": "train", "command": "python train.py"}


@pytest.fixture
def vision(roles) -> Project:  # noqa: ANN001
    project = Project.objects.create(name="vision", share=2.0)
    Membership.objects.create(project=project, user=roles.owner)
    return project


def test_a_user_without_a_project_submits_as_before_to_no_project(roles, api_as):
    response = api_as(roles.owner).post(URL, BODY, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["project"] is None
    assert Job.objects.get().project is None


def test_the_only_project_of_a_user_is_their_default(roles, api_as, vision):
    response = api_as(roles.owner).post(URL, BODY, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["project"] == "vision"
    assert Job.objects.get().project == vision


def test_a_named_project_is_charged_and_the_default_applies_otherwise(roles, api_as, vision):
    nlp = Project.objects.create(name="nlp")
    Membership.objects.create(project=nlp, user=roles.owner, is_default=True)
    client = api_as(roles.owner)
    assert client.post(URL, BODY, format="json").json()["project"] == "nlp"
    assert client.post(URL, {**BODY, "project": "vision"}, format="json").json()["project"] == "vision"


def test_several_projects_and_no_default_is_refused_naming_the_field(roles, api_as, vision):
    Membership.objects.create(project=Project.objects.create(name="nlp"), user=roles.owner)
    response = api_as(roles.owner).post(URL, BODY, format="json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["project"]
    assert "nlp, vision" in response.json()["errors"]["project"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize("name, says", [
    ("vision", 'not a member of project "vision"'),
    ("nope", 'No project is named "nope"'),
    ("' OR 1=1 --", "No project is named"),
])
def test_a_project_the_user_is_not_in_is_refused_and_nothing_written(roles, api_as, vision, name, says):
    response = api_as(roles.other).post(URL, {**BODY, "project": name}, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["project"]
    assert says in response.json()["errors"]["project"][0]
    assert not Job.objects.exists()


def test_a_project_that_is_not_a_string_is_refused_by_type(roles, api_as, vision):
    response = api_as(roles.owner).post(URL, {**BODY, "project": 7}, format="json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["project"]
    assert not Job.objects.exists()


def test_the_form_refuses_a_foreign_project_on_its_field(roles, browser_as, vision):
    form = {"name": "nb", "command": "python x.py", "job_class": "BE", "num_gpus": "1", "grace_period": "30"}
    response = browser_as(roles.other).post("/jobs/new/", {**form, "project": "vision"})
    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["project"]
    assert not Job.objects.exists()
    ok = browser_as(roles.owner).post("/jobs/new/", {**form, "project": "vision"})
    assert ok.status_code == 302
    assert Job.objects.get().project == vision


def test_the_form_offers_the_users_projects(roles, browser_as, vision):
    Project.objects.create(name="secret-project")
    page = browser_as(roles.owner).get("/jobs/new/").content.decode()
    assert '<option value="vision">' in page
    assert "secret-project" not in page


def test_a_job_array_names_the_position_and_field(roles, api_as, vision):
    body = {"jobs": [{**BODY, "project": "vision"}, {**BODY, "project": "nope"}]}
    response = api_as(roles.owner).post("/api/v1/jobs/array/", body, format="json")
    assert response.status_code == 400, response.content
    assert "project" in response.content.decode() and "nope" in response.content.decode()
    assert not Job.objects.exists()
    ok = api_as(roles.owner).post("/api/v1/jobs/array/", {"jobs": [{**BODY, "project": "vision"}, BODY]},
                                  format="json")
    assert ok.status_code == 201, ok.content
    assert [j["project"] for j in ok.json()["jobs"]] == ["vision", "vision"]


def test_a_projects_priority_range_binds_its_jobs(roles, api_as, vision):
    Project.objects.filter(pk=vision.pk).update(min_priority=-10, max_priority=10)
    client = api_as(roles.owner)
    high = client.post(URL, {**BODY, "priority": 11}, format="json")
    assert high.status_code == 400
    assert high.json()["errors"] == {"priority": ["At most 10 for jobs of project vision."]}
    low = client.post(URL, {**BODY, "priority": -11}, format="json")
    assert low.json()["errors"] == {"priority": ["At least -10 for jobs of project vision."]}
    assert not Job.objects.exists()
    assert client.post(URL, {**BODY, "priority": 10}, format="json").status_code == 201


def test_priority_problem_without_a_range_or_project_is_none(vision):
    assert priority_problem(None, 1000) is None
    assert priority_problem(vision, -1000) is None


def test_a_user_has_at_most_one_default_project(roles, vision):
    Membership.objects.filter(project=vision).update(is_default=True)
    nlp = Project.objects.create(name="nlp")
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(project=nlp, user=roles.owner, is_default=True)


def test_a_share_must_be_positive(roles):
    with pytest.raises(IntegrityError), transaction.atomic():
        Project.objects.create(name="zero", share=0)


def test_resolve_and_names_of(roles, vision):
    assert resolve(roles.owner, "") == (vision, None)
    assert resolve(roles.other, "") == (None, None)
    assert names_of(roles.owner) == ["vision"] and names_of(roles.other) == []

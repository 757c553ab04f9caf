"""The priority range each user or group may use, at submission: refused above (or below) it, naming the field."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from scheduler.models import Job, Quota

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"
FORM = {"name": "notebook", "command": "python explore.py", "job_class": "BE", "num_gpus": "1",
        "grace_period": "30"}


def test_api_refuses_a_priority_above_the_users_range_with_the_field_named(roles, api_as):
    Quota.objects.create(user=roles.owner, max_priority=10)
    client = api_as(roles.owner)
    response = client.post(URL, {"name": "j", "command": "python t.py", "priority": 11}, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["priority"]
    assert "Must be between -1000 and 10 (quota of user" in response.content.decode()
    assert not Job.objects.filter(owner=roles.owner).exists()
    ok = client.post(URL, {"name": "j", "command": "python t.py", "priority": 10}, format="json")
    assert ok.status_code == 201 and ok.json()["priority"] == 10


def test_a_group_range_binds_its_members_in_the_form_too(roles, browser_as):
    group = Group.objects.create(name="students")
    roles.owner.groups.add(group)
    Quota.objects.create(group=group, min_priority=-5, max_priority=5)
    response = browser_as(roles.owner).post("/jobs/new/", {**FORM, "priority": "6"})
    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["priority"]
    assert "quota of group students" in response.context["form"].errors["priority"][0]
    assert not Job.objects.filter(owner=roles.owner).exists()
    # Another user is not bound by the group's range.
    other = browser_as(roles.other).post("/jobs/new/", {**FORM, "priority": "6"})
    assert other.status_code == 302


def test_a_job_array_is_refused_whole_with_the_position_and_field(roles, api_as):
    Quota.objects.create(user=roles.owner, max_priority=0)
    body = {"jobs": [{"name": "a", "command": "x"}, {"name": "b", "command": "x", "priority": 1}]}
    response = api_as(roles.owner).post("/api/v1/jobs/array/", body, format="json")
    assert response.status_code == 400, response.content
    assert "priority" in response.content.decode() and "Must be between" in response.content.decode()
    assert not Job.objects.filter(owner=roles.owner).exists()

"""Submissions from a user without a usable POSIX identity are refused by form, API, job array
and CLI, naming why, with nothing written; the single-user banner; the identities' admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from scheduler.identity import PosixIdentity
from scheduler.models import Job, JobEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def nameless(db) -> User:  # noqa: ANN001
    """A user whose username is not a POSIX name and who has no identity row."""
    return User.objects.create_user("Dana@Example.org", "dana@example.org", "a-long-test-password-42")


def test_api_submission_without_identity_is_a_400_naming_identity(nameless, api_as) -> None:
    response = api_as(nameless).post("/api/v1/jobs/", {"name": "x", "command": "true"}, format="json")
    assert response.status_code == 400
    assert "no POSIX identity" in response.json()["errors"]["identity"][0]
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_api_reports_the_identity_beside_field_errors(nameless, api_as) -> None:
    response = api_as(nameless).post("/api/v1/jobs/", {"name": "", "command": "true"}, format="json")
    assert response.status_code == 400
    assert set(response.json()["errors"]) >= {"name"}


def test_job_array_without_identity_is_a_400_and_writes_nothing(nameless, api_as) -> None:
    body = {"jobs": [{"name": "a", "command": "true"}, {"name": "b", "command": "true"}]}
    response = api_as(nameless).post("/api/v1/jobs/array/", body, format="json")
    assert response.status_code == 400
    assert "identity" in response.json()["errors"]
    assert not Job.objects.exists()


def test_form_submission_without_identity_shows_the_reason(nameless, browser_as) -> None:
    response = browser_as(nameless).post("/jobs/new/", {"name": "x", "command": "true", "job_class": "BE",
                                                         "num_gpus": 1})
    assert response.status_code == 400
    assert "no POSIX identity" in response.content.decode()
    assert not Job.objects.exists()


def test_an_identity_set_by_an_admin_lets_the_user_submit_and_is_stored_on_the_job(nameless, api_as) -> None:
    PosixIdentity.objects.create(user=nameless, posix_name="dana")
    response = api_as(nameless).post("/api/v1/jobs/", {"name": "x", "command": "true"}, format="json")
    assert response.status_code == 201
    assert Job.objects.get().run_as == "dana"


def test_single_user_mode_accepts_anyone_and_stores_no_user(nameless, api_as, settings) -> None:
    settings.GPUSCHED_SINGLE_USER = True
    assert api_as(nameless).post("/api/v1/jobs/", {"name": "x", "command": "true"}, format="json").status_code == 201
    assert Job.objects.get().run_as == ""


def test_every_page_shows_the_single_user_banner_only_in_that_mode(roles, browser_as, settings) -> None:
    client = browser_as(roles.owner)
    for path in ("/jobs/", "/jobs/new/", "/account/tokens/", "/accounts/login/"):
        assert "Single-user mode" not in client.get(path, follow=True).content.decode()
    settings.GPUSCHED_SINGLE_USER = True
    for path in ("/jobs/", "/jobs/new/", "/account/tokens/"):
        assert "Single-user mode" in client.get(path).content.decode(), path
    assert "Single-user mode" in browser_as(None).get("/accounts/login/").content.decode()


def test_superuser_sets_an_identity_in_the_admin_and_bad_names_are_refused(roles, browser_as) -> None:
    boss = User.objects.create_superuser("boss", "boss@example.org", "a-long-test-password-42")
    client = browser_as(boss)
    bad = client.post("/admin/scheduler/posixidentity/add/", {"user": roles.other.pk, "posix_name": "root"})
    assert bad.status_code == 200 and "superuser" in bad.content.decode()
    assert not PosixIdentity.objects.exists()
    ok = client.post("/admin/scheduler/posixidentity/add/", {"user": roles.other.pk, "posix_name": "bsmith"})
    assert ok.status_code == 302
    assert PosixIdentity.objects.get(user=roles.other).posix_name == "bsmith"


def test_staff_who_are_not_superusers_see_identities_but_cannot_set_them(roles, browser_as) -> None:
    client = browser_as(roles.staff)
    assert client.get("/admin/scheduler/posixidentity/").status_code == 200
    response = client.post("/admin/scheduler/posixidentity/add/", {"user": roles.staff.pk, "posix_name": "root2"})
    assert response.status_code == 403
    assert not PosixIdentity.objects.exists()

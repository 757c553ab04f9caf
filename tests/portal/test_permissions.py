"""The permission matrix: anonymous, owner, another user and staff over every page and endpoint.

Each row names a request about a job (and a token) owned by ``alice`` and the
status each role must get. Another user's ids answer exactly like ids that do
not exist (404), so a user cannot even detect another user's jobs.
"""

from __future__ import annotations

import pytest

from portal.models import ApiToken
from scheduler.models import Job, JobState, Quota

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "owner", "other", "staff"]
LOGIN = 302  # pages send anonymous visitors to the login page

# (kind, method, path, {role: status}); {job} is a job of the owner, {token} a token of the owner.
MATRIX = [
    ("page", "get", "/", {"anonymous": 302, "owner": 302, "other": 302, "staff": 302}),
    ("page", "get", "/accounts/login/", {"anonymous": 200, "owner": 302, "other": 302, "staff": 302}),
    ("page", "get", "/jobs/", {"anonymous": LOGIN, "owner": 200, "other": 200, "staff": 200}),
    ("page", "get", "/jobs/new/", {"anonymous": LOGIN, "owner": 200, "other": 200, "staff": 200}),
    ("page", "post", "/jobs/new/", {"anonymous": LOGIN, "owner": 302, "other": 302, "staff": 302}),
    ("page", "get", "/jobs/{job}/", {"anonymous": LOGIN, "owner": 200, "other": 404, "staff": 200}),
    ("page", "get", "/jobs/{job}/cancel/", {"anonymous": LOGIN, "owner": 405, "other": 405, "staff": 405}),
    ("page", "post", "/jobs/{job}/cancel/", {"anonymous": LOGIN, "owner": 302, "other": 404, "staff": 302}),
    ("page", "get", "/jobs/{job}/hold/", {"anonymous": LOGIN, "owner": 405, "other": 405, "staff": 405}),
    ("page", "post", "/jobs/{job}/hold/", {"anonymous": LOGIN, "owner": 302, "other": 404, "staff": 302}),
    ("page", "get", "/jobs/{job}/release/", {"anonymous": LOGIN, "owner": 405, "other": 405, "staff": 405}),
    ("page", "post", "/jobs/{job}/release/", {"anonymous": LOGIN, "owner": 302, "other": 404, "staff": 302}),
    ("page", "get", "/jobs/{job}/priority/", {"anonymous": LOGIN, "owner": 405, "other": 405, "staff": 405}),
    ("page", "post", "/jobs/{job}/priority/", {"anonymous": LOGIN, "owner": 302, "other": 404, "staff": 302}),
    ("page", "get", "/sessions/new/", {"anonymous": LOGIN, "owner": 200, "other": 200, "staff": 200}),
    ("page", "post", "/sessions/new/", {"anonymous": LOGIN, "owner": 302, "other": 302, "staff": 302}),
    ("page", "get", "/account/tokens/", {"anonymous": LOGIN, "owner": 200, "other": 200, "staff": 200}),
    ("page", "post", "/account/tokens/", {"anonymous": LOGIN, "owner": 200, "other": 200, "staff": 200}),
    ("page", "post", "/account/tokens/{token}/revoke/", {"anonymous": LOGIN, "owner": 302, "other": 404,
                                                          "staff": 404}),
    ("page", "get", "/admin/", {"anonymous": 302, "owner": 302, "other": 302, "staff": 200}),
    ("page", "get", "/admin/scheduler/job/", {"anonymous": 302, "owner": 302, "other": 302, "staff": 200}),
    ("page", "get", "/admin/scheduler/job/{job}/change/", {"anonymous": 302, "owner": 302, "other": 302,
                                                           "staff": 200}),
    ("page", "get", "/admin/scheduler/quota/", {"anonymous": 302, "owner": 302, "other": 302, "staff": 200}),
    ("page", "post", "/admin/scheduler/quota/add/", {"anonymous": 302, "owner": 302, "other": 302, "staff": 302}),
    ("page", "get", "/admin/scheduler/posixidentity/", {"anonymous": 302, "owner": 302, "other": 302,
                                                        "staff": 200}),
    ("page", "post", "/admin/scheduler/posixidentity/add/", {"anonymous": 302, "owner": 302, "other": 302,
                                                             "staff": 403}),
    ("page", "get", "/admin/scheduler/image/", {"anonymous": 302, "owner": 302, "other": 302, "staff": 200}),
    ("page", "post", "/admin/scheduler/image/add/", {"anonymous": 302, "owner": 302, "other": 302, "staff": 403}),
    ("page", "get", "/usage/", {"anonymous": LOGIN, "owner": 200, "other": 200, "staff": 200}),
    ("page", "get", "/usage/csv/", {"anonymous": LOGIN, "owner": 200, "other": 200, "staff": 200}),
    ("page", "get", "/admin/scheduler/project/", {"anonymous": 302, "owner": 302, "other": 302, "staff": 200}),
    ("page", "post", "/admin/scheduler/project/add/", {"anonymous": 302, "owner": 302, "other": 302,
                                                       "staff": 403}),
    ("page", "get", "/admin/cluster/node/", {"anonymous": 302, "owner": 302, "other": 302, "staff": 200}),
    ("api", "get", "/api/v1/jobs/", {"anonymous": 401, "owner": 200, "other": 200, "staff": 200}),
    ("api", "post", "/api/v1/jobs/", {"anonymous": 401, "owner": 201, "other": 201, "staff": 201}),
    ("api", "post", "/api/v1/jobs/array/", {"anonymous": 401, "owner": 201, "other": 201, "staff": 201}),
    ("api", "get", "/api/v1/jobs/array/", {"anonymous": 401, "owner": 405, "other": 405, "staff": 405}),
    ("api", "get", "/api/v1/jobs/{job}/", {"anonymous": 401, "owner": 200, "other": 404, "staff": 200}),
    ("api", "post", "/api/v1/jobs/{job}/cancel/", {"anonymous": 401, "owner": 202, "other": 404, "staff": 202}),
    ("api", "patch", "/api/v1/jobs/{job}/", {"anonymous": 401, "owner": 200, "other": 404, "staff": 200}),
    ("api", "get", "/api/v1/jobs/{job}/hold/", {"anonymous": 401, "owner": 405, "other": 405, "staff": 405}),
    ("api", "post", "/api/v1/jobs/{job}/hold/", {"anonymous": 401, "owner": 200, "other": 404, "staff": 200}),
    ("api", "post", "/api/v1/jobs/{job}/release/", {"anonymous": 401, "owner": 200, "other": 404, "staff": 200}),
    ("api", "get", "/api/v1/jobs/{job}/logs/", {"anonymous": 401, "owner": 200, "other": 404, "staff": 200}),
    ("api", "get", "/api/v1/jobs/{job}/progress/", {"anonymous": 401, "owner": 200, "other": 404, "staff": 200}),
    ("api", "post", "/api/v1/sessions/", {"anonymous": 401, "owner": 201, "other": 201, "staff": 201}),
    ("api", "get", "/api/v1/quota/", {"anonymous": 401, "owner": 200, "other": 200, "staff": 200}),
    ("api", "get", "/api/v1/nodes/", {"anonymous": 401, "owner": 200, "other": 200, "staff": 200}),
    ("api", "get", "/api/v1/images/", {"anonymous": 401, "owner": 200, "other": 200, "staff": 200}),
    ("api", "get", "/api/v1/fairshare/", {"anonymous": 401, "owner": 200, "other": 200, "staff": 200}),
    ("api", "get", "/api/v1/usage/", {"anonymous": 401, "owner": 200, "other": 200, "staff": 200}),
    ("api", "get", "/api/v1/usage/csv/", {"anonymous": 401, "owner": 200, "other": 200, "staff": 200}),
    ("api", "get", "/api/schema/", {"anonymous": 200, "owner": 200, "other": 200, "staff": 200}),
    ("api", "get", "/api/docs/", {"anonymous": 200, "owner": 200, "other": 200, "staff": 200}),
]

BODIES = {
    "/jobs/new/": {"name": "from form", "command": "echo hi", "job_class": "BE", "num_gpus": 1},
    "/account/tokens/": {"name": "laptop"},
    "/admin/scheduler/quota/add/": {"group": "", "user": "", "max_gpus": "4", "budget_period_days": "7",
                                    "note": "added in matrix"},
    "/admin/scheduler/posixidentity/add/": {"user": "", "posix_name": "matrix"},
    "/admin/scheduler/image/add/": {"name": "matrix", "uri": "/shared/m.tar", "digest": "sha256:" + "0" * 64},
    "/api/v1/jobs/": {"name": "from api", "command": "echo hi"},
    "/api/v1/jobs/{job}/": {"priority": 1},
    "/sessions/new/": {"kind": "jupyter", "num_gpus": 1},
    "/api/v1/sessions/": {"kind": "terminal"},
    "/api/v1/jobs/array/": {"jobs": [{"name": "array 0", "command": "echo 0"}, {"name": "array 1", "command": "echo 1"}]},
}

CASES = [(kind, method, path, role, expected[role]) for kind, method, path, expected in MATRIX for role in ROLES]


@pytest.mark.parametrize("kind, method, path, role, expected", CASES,
                         ids=[f"{m.upper()} {p} as {r}" for _, m, p, r, _ in CASES])
def test_permission_matrix(roles, make_job, api_as, browser_as, kind, method, path, role, expected) -> None:
    job = make_job(roles.owner)
    token, _ = ApiToken.issue(roles.owner, "owner's")
    user = None if role == "anonymous" else getattr(roles, role)
    url = path.format(job=job.pk, token=token.pk)
    body = BODIES.get(path)
    if body and "user" in body:  # the quota form needs a real user id
        body = {**body, "user": str(roles.other.pk)}
    if kind == "api":
        response = getattr(api_as(user), method)(url, body, format="json") if body else getattr(api_as(user), method)(url)
    else:
        response = getattr(browser_as(user), method)(url, body or {})
    assert response.status_code == expected, (response.status_code, response.content[:300])
    if kind == "api" and expected >= 400:
        assert response["Content-Type"].startswith("application/json")
        assert "detail" in response.json()


def test_other_users_job_is_indistinguishable_from_a_missing_one(roles, make_job, api_as) -> None:
    job = make_job(roles.owner)
    missing = job.pk + 1000
    client = api_as(roles.other)
    for suffix in ("", "cancel/", "logs/", "hold/", "release/"):
        method = client.post if suffix in ("cancel/", "hold/", "release/") else client.get
        theirs, absent = method(f"/api/v1/jobs/{job.pk}/{suffix}"), method(f"/api/v1/jobs/{missing}/{suffix}")
        assert (theirs.status_code, theirs.json()) == (absent.status_code, absent.json()) == (404, {"detail": "Not found."})
    theirs = client.patch(f"/api/v1/jobs/{job.pk}/", {"priority": 5}, format="json")
    absent = client.patch(f"/api/v1/jobs/{missing}/", {"priority": 5}, format="json")
    assert (theirs.status_code, theirs.json()) == (absent.status_code, absent.json()) == (404, {"detail": "Not found."})
    assert Job.objects.get(pk=job.pk).priority == 0


def test_refused_writes_change_nothing(roles, make_job, api_as, browser_as) -> None:
    job = make_job(roles.owner)
    token, _ = ApiToken.issue(roles.owner, "owner's")
    api_as(roles.other).post(f"/api/v1/jobs/{job.pk}/cancel/")
    browser_as(roles.other).post(f"/jobs/{job.pk}/cancel/")
    browser_as(None).post(f"/jobs/{job.pk}/cancel/")
    api_as(None).post(f"/api/v1/jobs/{job.pk}/cancel/")
    browser_as(roles.other).post(f"/account/tokens/{token.pk}/revoke/")
    browser_as(roles.owner).post("/admin/scheduler/quota/add/", {**BODIES["/admin/scheduler/quota/add/"],
                                                                 "user": str(roles.owner.pk)})
    api_as(None).post("/api/v1/jobs/", BODIES["/api/v1/jobs/"], format="json")
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert Job.objects.count() == 1
    assert ApiToken.objects.get(pk=token.pk).revoked is None
    assert not Quota.objects.exists()


def test_staff_quota_add_and_owner_cancel_take_effect(roles, make_job, api_as, browser_as) -> None:
    job = make_job(roles.owner)
    browser_as(roles.staff).post("/admin/scheduler/quota/add/", {**BODIES["/admin/scheduler/quota/add/"],
                                                                 "user": str(roles.other.pk)})
    assert Quota.objects.get().user == roles.other
    browser_as(roles.owner).post(f"/jobs/{job.pk}/cancel/")
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED


def test_session_writes_need_the_csrf_token(roles, make_job, browser_as) -> None:
    from rest_framework.test import APIClient

    job = make_job(roles.owner)
    browser = browser_as(roles.owner, enforce_csrf=True)
    assert browser.post(f"/jobs/{job.pk}/cancel/").status_code == 403
    assert browser.post("/jobs/new/", BODIES["/jobs/new/"]).status_code == 403
    api = APIClient(enforce_csrf_checks=True)
    api.force_login(roles.owner)
    response = api.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert Job.objects.count() == 1
    # with the token from the form page, the same post goes through
    page = browser.get(f"/jobs/{job.pk}/")
    csrf = page.context["csrf_token"]
    assert browser.post(f"/jobs/{job.pk}/cancel/", {"csrfmiddlewaretoken": str(csrf)}).status_code == 302
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED

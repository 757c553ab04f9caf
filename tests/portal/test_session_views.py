""""Start a notebook" and the session status: permission matrix, bad input, the job page's panel."""

from __future__ import annotations

import pytest

from interactive.models import SessionEndpoint
from scheduler.models import Job, JobState

pytestmark = pytest.mark.django_db


def test_the_form_needs_a_login(browser_as) -> None:  # noqa: ANN001
    response = browser_as(None).get("/sessions/new/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert browser_as(None).post("/sessions/new/", {"kind": "jupyter", "num_gpus": 1}).status_code == 302
    assert not Job.objects.exists()


def test_starting_a_notebook_from_the_form_submits_a_te_session(browser_as, roles) -> None:  # noqa: ANN001
    client = browser_as(roles.owner)
    assert b"Start a notebook" in client.get("/sessions/new/").content
    response = client.post("/sessions/new/", {"kind": "jupyter", "num_gpus": 2, "time_limit": 900})
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.owner, job.session_kind, job.job_class, job.num_gpus, job.time_limit) == (roles.owner, "jupyter", "TE", 2, 900)


@pytest.mark.parametrize("data,field", [({"kind": "vnc", "num_gpus": 1}, "kind"), ({"kind": "jupyter", "num_gpus": 0}, "num_gpus"),
                                        ({"kind": "jupyter", "num_gpus": 1, "time_limit": 5}, "time_limit"),
                                        ({"kind": "jupyter", "num_gpus": 1, "image": "nope"}, "image")])
def test_bad_input_names_the_field_and_writes_nothing(browser_as, roles, data, field) -> None:  # noqa: ANN001
    response = browser_as(roles.owner).post("/sessions/new/", data)
    assert response.status_code == 400 and field in response.context["form"].errors
    assert not Job.objects.exists()


@pytest.mark.parametrize("who,status", [("anonymous", 302), ("other", 404), ("owner", 200), ("staff", 200)])
def test_status_permission_matrix(browser_as, roles, make_session, who, status) -> None:  # noqa: ANN001
    job = make_session(roles.owner, 1)
    response = browser_as(None if who == "anonymous" else getattr(roles, who)).get(f"/jobs/{job.pk}/session/")
    assert response.status_code == status
    assert b"s3cr3t" not in response.content
    if status == 200:
        assert response.json()["phase"] == "ready" and response.json()["url"] == f"/sessions/{job.pk}/lab"


def test_status_of_a_batch_job_or_a_forged_id_is_404(browser_as, roles, make_job) -> None:  # noqa: ANN001
    job = make_job(roles.owner, state=JobState.RUNNING)
    client = browser_as(roles.owner)
    assert client.get(f"/jobs/{job.pk}/session/").status_code == 404
    assert client.get("/jobs/999999/session/").status_code == 404


def test_the_job_page_shows_the_session_panel_with_open_and_stop(browser_as, roles, make_session) -> None:  # noqa: ANN001
    job = make_session(roles.owner, 1)
    page = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="session"' in page and f'href="/sessions/{job.pk}/lab"' in page and "Stop session" in page
    assert SessionEndpoint.objects.get(job=job).secret not in page
    assert "portal/session.js" in page


def test_a_batch_job_page_has_no_session_panel(browser_as, roles, make_job) -> None:  # noqa: ANN001
    job = make_job(roles.owner, state=JobState.RUNNING)
    page = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="session"' not in page and "Cancel job" in page


@pytest.mark.parametrize("who,staff_access,status", [("anonymous", False, 302), ("other", False, 404),
                                                      ("owner", False, 200), ("staff", False, 404),
                                                      ("staff", True, 200)])
def test_terminal_page_permission_matrix(browser_as, roles, make_session, settings, who, staff_access,
                                         status) -> None:  # noqa: ANN001
    settings.GPUSCHED_SESSION_STAFF_ACCESS = staff_access
    job = make_session(roles.owner, 1, kind="terminal")
    response = browser_as(None if who == "anonymous" else getattr(roles, who)).get(f"/sessions/{job.pk}/terminal/")
    assert response.status_code == status
    assert b"s3cr3t" not in response.content
    if status == 200:
        html = response.content.decode()
        assert f'data-pty-path="/sessions/{job.pk}/pty"' in html and "vendor/xterm/xterm.js" in html


@pytest.mark.parametrize("kind,state", [("jupyter", JobState.RUNNING), ("terminal", JobState.COMPLETED),
                                        ("terminal", JobState.PENDING)])
def test_terminal_page_of_a_notebook_or_a_session_not_running_is_404(browser_as, roles, make_session, kind,
                                                                      state) -> None:  # noqa: ANN001
    job = make_session(roles.owner, 1, state=state, kind=kind)
    assert browser_as(roles.owner).get(f"/sessions/{job.pk}/terminal/").status_code == 404


def test_terminal_page_of_a_forged_id_is_404(browser_as, roles) -> None:  # noqa: ANN001
    client = browser_as(roles.owner)
    for path in ("/sessions/999999/terminal/", "/sessions/0/terminal/"):
        assert client.get(path).status_code == 404

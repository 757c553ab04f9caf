"""Forecast start and queue position on the pages: the job page (and its live
state), the job list, the cluster page's queue; only for jobs the viewer may see."""

from __future__ import annotations

import pytest
import redis

from portal.dashboard import job_page
from portal.dashboard.selectors import queue_by_class
from scheduler import forecast_store

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

AT = 1_700_000_000.0


@pytest.fixture
def stored(redis_url):  # noqa: ANN001, ANN201
    client = redis.Redis.from_url(redis_url)
    client.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)
    yield lambda entries: forecast_store.write(entries, AT)
    client.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)


@pytest.mark.parametrize("role, status", [("owner", 200), ("staff", 200), ("other", 404), (None, 302)])
def test_job_page_shows_the_forecast_to_who_may_see_the_job(roles, browser_as, make_job, stored, role, status):
    job = make_job(roles.owner)
    stored({job.pk: (AT + 600, 4)})
    response = browser_as(getattr(roles, role) if role else None).get(f"/jobs/{job.pk}/")
    assert response.status_code == status
    page = response.content.decode()
    if status == 200:
        assert 'datetime="2023-11-14T22:23:20+00:00"' in page and "position 4 in the BE queue" in page
    else:
        assert "position 4" not in page


def test_job_page_says_when_no_forecast_is_computed_yet(roles, browser_as, make_job, stored):
    job = make_job(roles.owner)
    stored({})
    assert "not computed yet" in browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()


def test_the_live_state_carries_the_forecast(roles, make_job, stored):
    pending, running = make_job(roles.owner), make_job(roles.owner, state="RUNNING")
    stored({pending.pk: (None, 2), running.pk: (AT, 1)})
    assert job_page.job_state(pending)["forecast"] == {"start": None, "position": 2,
                                                       "computed_at": "2023-11-14T22:13:20Z"}
    assert job_page.job_state(running)["forecast"] is None


def test_job_list_shows_queue_position_and_forecast(roles, browser_as, make_job, stored):
    job = make_job(roles.owner)
    stored({job.pk: (AT + 60, 7)})
    page = browser_as(roles.owner).get("/jobs/").content.decode()
    assert "<th>Queue</th>" in page and "<td>7</td>" in page and "2023-11-14 22:14" in page


def test_cluster_queue_shows_forecasts_of_visible_jobs_only(roles, make_job, stored):
    mine, theirs = make_job(roles.owner), make_job(roles.other)
    stored({mine.pk: (AT, 1), theirs.pk: (AT, 2)})
    jobs = {j["id"]: j for j in queue_by_class(roles.owner)["BE"]["jobs"]}
    assert jobs[mine.pk]["forecast_start"] == "2023-11-14T22:13:20Z"
    assert jobs[theirs.pk]["forecast_start"] is None
    staff_view = {j["id"]: j for j in queue_by_class(roles.staff)["BE"]["jobs"]}
    assert staff_view[theirs.pk]["forecast_start"] == "2023-11-14T22:13:20Z"

"""The ``forecast`` field of a job in the API: a pending job's stored forecast
start and queue position, for those who may see the job (owner, staff); null
for a job that is not pending or not yet forecast."""

from __future__ import annotations

import pytest
import redis

from scheduler import forecast_store

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

AT = 1_700_000_000.0


@pytest.fixture
def stored(redis_url):  # noqa: ANN001, ANN201
    client = redis.Redis.from_url(redis_url)
    client.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)
    yield lambda entries: forecast_store.write(entries, AT)
    client.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)


@pytest.mark.parametrize("role, status", [("owner", 200), ("staff", 200), ("other", 404), (None, 401)])
def test_detail_permissions(roles, api_as, make_job, stored, role, status) -> None:
    job = make_job(roles.owner)
    stored({job.pk: (AT + 600, 3)})
    response = api_as(getattr(roles, role) if role else None).get(f"/api/v1/jobs/{job.pk}/")
    assert response.status_code == status
    body = response.json()
    if status == 200:
        assert body["forecast"] == {"start": "2023-11-14T22:23:20Z", "position": 3,
                                    "computed_at": "2023-11-14T22:13:20Z"}
    else:
        assert "forecast" not in body and "2023-11-14" not in response.content.decode()


def test_the_list_shows_forecasts_of_visible_jobs_only(roles, api_as, make_job, stored) -> None:
    mine, theirs = make_job(roles.owner), make_job(roles.other)
    stored({mine.pk: (AT, 1), theirs.pk: (None, 2)})
    results = api_as(roles.owner).get("/api/v1/jobs/").json()["results"]
    assert [(j["id"], j["forecast"]["position"]) for j in results] == [(mine.pk, 1)]
    everyone = {j["id"]: j["forecast"] for j in api_as(roles.staff).get("/api/v1/jobs/").json()["results"]}
    assert everyone[theirs.pk] == {"start": None, "position": 2, "computed_at": "2023-11-14T22:13:20Z"}


def test_no_forecast_for_a_job_not_pending_or_not_computed(roles, api_as, make_job, stored) -> None:
    running, fresh = make_job(roles.owner, state="RUNNING"), make_job(roles.owner)
    stored({running.pk: (AT, 1)})  # stale entry of a job that has started since
    for job in (running, fresh):
        assert api_as(roles.owner).get(f"/api/v1/jobs/{job.pk}/").json()["forecast"] is None


def test_a_hostile_job_id_is_a_404_not_a_forecast(roles, api_as, stored) -> None:
    stored({})
    assert api_as(roles.owner).get("/api/v1/jobs/1%20OR%201=1/").status_code == 404

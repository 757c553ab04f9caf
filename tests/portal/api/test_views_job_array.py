"""POST /api/v1/jobs/array/: several jobs in one request, all or none, errors naming position and field."""

from __future__ import annotations

import pytest

from scheduler.models import Job, JobEvent, JobState, Quota
from scheduler.services import MAX_ARRAY_JOBS
from tests.support.live_helpers import make_node

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/array/"


def job(i: int, **fields) -> dict:  # noqa: ANN003
    return {"name": f"array-{i}", "command": f"echo {i}", **fields}


def test_array_stores_every_job_in_order_with_its_event_and_answers_as_get(roles, api_as) -> None:
    client = api_as(roles.owner)
    response = client.post(URL, {"jobs": [job(0), job(1, job_class="TE", num_gpus=2), job(2, priority=5)]},
                           format="json")
    assert response.status_code == 201, response.content
    answered = response.json()["jobs"]
    assert [j["name"] for j in answered] == ["array-0", "array-1", "array-2"]
    ids = [j["id"] for j in answered]
    assert ids == sorted(ids)
    stored = Job.objects.filter(owner=roles.owner)
    assert sorted(stored.values_list("id", flat=True)) == ids
    assert all(j.state == JobState.PENDING for j in stored)
    assert JobEvent.objects.filter(job_id__in=ids, from_state="", reason="Submitted").count() == 3
    for one in answered:  # the answer is what a later read returns
        assert client.get(f"/api/v1/jobs/{one['id']}/").json() == one


def test_single_submission_answer_equals_a_later_read(roles, api_as) -> None:
    client = api_as(roles.owner)
    answer = client.post("/api/v1/jobs/", job(0, job_class="TE", num_gpus=1, time_limit=60), format="json")
    assert answer.status_code == 201
    assert answer.json()["events"][0]["reason"] == "Submitted" and answer.json()["attempts"] == []
    assert client.get(f"/api/v1/jobs/{answer.json()['id']}/").json() == answer.json()


@pytest.mark.parametrize("body, field", [
    ({"jobs": [job(0), job(1, num_gpus=0)]}, "jobs[1].num_gpus"),
    ({"jobs": [job(0, num_gpus="2")]}, "jobs[0].num_gpus"),
    ({"jobs": [job(0, bogus=1)]}, "jobs[0].bogus"),
    ({"jobs": [job(0), {"name": "no command"}]}, "jobs[1].command"),
    ({"jobs": [job(0), "not an object"]}, "jobs[1]"),
    ({"jobs": []}, "jobs"),
    ({"jobs": job(0)}, "jobs"),
    ({}, "jobs"),
    ({"jobs": [job(0)], "count": 3}, "count"),
    ({"jobs": [job(i) for i in range(MAX_ARRAY_JOBS + 1)]}, "jobs"),
])
def test_bad_array_is_a_400_naming_position_and_field_and_writes_nothing(roles, api_as, settings, body, field) -> None:
    settings.API_MAX_BODY_BYTES = 1 << 20  # the largest case tests the count, not the body limit
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1 << 20
    response = api_as(roles.owner).post(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()
    assert not Job.objects.exists()


def test_every_bad_job_is_named_at_once(roles, api_as) -> None:
    response = api_as(roles.owner).post(URL, {"jobs": [job(0, num_gpus=0), job(1), job(2, priority="x")]},
                                        format="json")
    assert set(response.json()["errors"]) == {"jobs[0].num_gpus", "jobs[2].priority"}


def test_cluster_rule_of_one_job_names_its_position(roles, api_as) -> None:
    make_node("n1", 4)
    response = api_as(roles.owner).post(URL, {"jobs": [job(0), job(1, job_class="TE", num_gpus=8)]}, format="json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["jobs[1].num_gpus"]
    assert not Job.objects.exists()


def test_pending_quota_counts_the_array_all_or_nothing(roles, api_as, make_job) -> None:
    Quota.objects.create(user=roles.owner, max_pending_jobs=3)
    make_job(roles.owner)
    client = api_as(roles.owner)
    refused = client.post(URL, {"jobs": [job(0), job(1), job(2)]}, format="json")
    assert refused.status_code == 403
    body = refused.json()
    assert (body["limit"], body["index"], body["current_usage"]) == ("max_pending_jobs", 2, 3)
    assert Job.objects.count() == 1  # none of the array was stored
    accepted = client.post(URL, {"jobs": [job(0), job(1)]}, format="json")
    assert accepted.status_code == 201 and Job.objects.count() == 3


def test_per_job_quota_names_the_job_refused(roles, api_as) -> None:
    Quota.objects.create(user=roles.owner, max_te_job_gpus=2)
    response = api_as(roles.owner).post(
        URL, {"jobs": [job(0, job_class="TE", num_gpus=2), job(1, job_class="TE", num_gpus=3)]}, format="json")
    assert response.status_code == 403
    assert (response.json()["limit"], response.json()["index"]) == ("max_te_job_gpus", 1)
    assert not Job.objects.exists()


def test_te_jobs_of_an_array_get_the_quota_runtime(roles, api_as) -> None:
    Quota.objects.create(user=roles.owner, max_te_runtime=600)
    response = api_as(roles.owner).post(URL, {"jobs": [job(0, job_class="TE"), job(1)]}, format="json")
    assert [j["time_limit"] for j in response.json()["jobs"]] == [600, None]


def test_one_scheduling_request_per_array(roles, api_as, monkeypatch, django_capture_on_commit_callbacks) -> None:
    from scheduler import services

    calls: list[str] = []
    monkeypatch.setattr(services, "request_scheduling", lambda: calls.append("cycle") or True)
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(roles.owner).post(URL, {"jobs": [job(i) for i in range(20)]}, format="json")
    assert response.status_code == 201 and calls == ["cycle"]

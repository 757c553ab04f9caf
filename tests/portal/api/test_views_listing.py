"""Listing, filtering, paging, retrieving, cancelling and logs through the API; nodes; the schema."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster.models import Gpu
from scheduler.models import Attempt, AttemptLog, Job, JobEvent, JobState

pytestmark = pytest.mark.django_db


# --- list: pagination and filters -----------------------------------------------


def test_list_is_paginated_newest_first(roles, api_as, make_job) -> None:
    jobs = [make_job(roles.owner, name=f"j{i}") for i in range(30)]
    client = api_as(roles.owner)
    first = client.get("/api/v1/jobs/").json()
    assert first["count"] == 30 and len(first["results"]) == 25 and first["previous"] is None
    assert first["results"][0]["id"] == jobs[-1].pk
    second = client.get(first["next"]).json()
    assert len(second["results"]) == 5 and second["next"] is None and second["previous"]
    ids = [j["id"] for j in first["results"] + second["results"]]
    assert sorted(ids) == sorted(j.pk for j in jobs)
    small = client.get("/api/v1/jobs/?page_size=7&page=2").json()
    assert len(small["results"]) == 7
    assert client.get("/api/v1/jobs/?page=9").status_code == 404


def test_filters_by_state_and_class(roles, api_as, make_job) -> None:
    make_job(roles.owner, JobState.RUNNING, job_class="TE")
    make_job(roles.owner, JobState.RUNNING, job_class="BE")
    make_job(roles.owner, JobState.PENDING, job_class="TE")
    client = api_as(roles.owner)

    def found(query: str) -> list[tuple[str, str]]:
        return sorted((j["state"], j["job_class"]) for j in client.get(f"/api/v1/jobs/?{query}").json()["results"])

    assert found("state=RUNNING") == [("RUNNING", "BE"), ("RUNNING", "TE")]
    assert found("job_class=TE") == [("PENDING", "TE"), ("RUNNING", "TE")]
    assert found("state=RUNNING&job_class=TE") == [("RUNNING", "TE")]
    assert found("state=COMPLETED") == []
    assert found("state=PENDING,RUNNING&job_class=TE") == [("PENDING", "TE"), ("RUNNING", "TE")]
    assert found("state=COMPLETED,PENDING") == [("PENDING", "TE")]
    assert found("state=" + ",".join(["PENDING"] * 5000)) == [("PENDING", "TE")]  # said many times, asked once


def test_a_state_list_with_an_unknown_member_is_a_400_naming_it(roles, api_as) -> None:
    response = api_as(roles.owner).get("/api/v1/jobs/?state=PENDING,DONE")
    assert response.status_code == 400
    assert response.json()["errors"]["state"][0].startswith('"DONE" is not one of ')


@pytest.mark.parametrize("query, field", [("state=DONE", "state"), ("job_class=XL", "job_class")])
def test_unknown_filter_value_is_a_400_naming_it(roles, api_as, query, field) -> None:
    response = api_as(roles.owner).get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 400 and field in response.json()["errors"]


def test_the_array_filter_lists_an_array_s_tasks_the_caller_may_see(roles, api_as, make_job) -> None:
    from scheduler.models import Job

    head = make_job(roles.owner, name="sweep_0")
    second = make_job(roles.owner, name="sweep_1")
    Job.objects.filter(pk__in=[head.pk, second.pk]).update(array_id=head.pk)
    Job.objects.filter(pk=second.pk).update(array_index=1)
    Job.objects.filter(pk=head.pk).update(array_index=0)
    make_job(roles.owner, name="alone")
    listed = api_as(roles.owner).get("/api/v1/jobs/", {"array": str(head.pk)}).json()["results"]
    assert sorted(j["name"] for j in listed) == ["sweep_0", "sweep_1"]
    assert api_as(roles.other).get("/api/v1/jobs/", {"array": str(head.pk)}).json()["results"] == []
    for bad in ("x", "-1", "1.5", "١٢", "9" * 19):  # not ASCII digits, or longer than any id
        response = api_as(roles.owner).get("/api/v1/jobs/", {"array": bad})
        assert response.status_code == 400 and response.json()["errors"]["array"][0].endswith(
            "is not a job array id (a job id, such as 12).")


def test_a_staff_owner_filter_longer_than_any_username_is_a_400_naming_it(roles, api_as) -> None:
    response = api_as(roles.staff).get("/api/v1/jobs/", {"owner": "x" * 151})
    assert response.status_code == 400
    assert response.json()["errors"]["owner"] == ["Not a username (at most 150 characters)."]


def test_users_list_only_their_own_jobs_and_staff_list_all(roles, api_as, make_job) -> None:
    mine = make_job(roles.owner)
    theirs = make_job(roles.other)
    assert [j["id"] for j in api_as(roles.owner).get("/api/v1/jobs/").json()["results"]] == [mine.pk]
    assert [j["id"] for j in api_as(roles.other).get("/api/v1/jobs/").json()["results"]] == [theirs.pk]
    staff = api_as(roles.staff)
    assert {j["id"] for j in staff.get("/api/v1/jobs/").json()["results"]} == {mine.pk, theirs.pk}
    assert [j["id"] for j in staff.get("/api/v1/jobs/?owner=bob").json()["results"]] == [theirs.pk]
    # the owner filter is a staff tool; for others it cannot widen the view
    assert [j["id"] for j in api_as(roles.owner).get("/api/v1/jobs/?owner=bob").json()["results"]] == [mine.pk]


# --- retrieve ------------------------------------------------------------------------


def test_retrieve_has_attempts_with_ledger_and_the_timeline(roles, api_as, make_job) -> None:
    job = make_job(roles.owner, JobState.RUNNING, num_gpus=2)
    now = timezone.now()
    Attempt.objects.filter(job=job).update(state="PREEMPTED", ended_at=now, notice_at=now, vacated_at=now,
                                           checkpointed=True, lost_gpu_seconds=0.0, exit_code=0)
    Attempt.objects.create(job=job, number=2, gpu_allocation={"n2": [3], "n1": [0]}, state="RUNNING")
    body = api_as(roles.owner).get(f"/api/v1/jobs/{job.pk}/").json()
    assert [a["number"] for a in body["attempts"]] == [1, 2]
    first, second = body["attempts"]
    assert (first["outcome"], first["checkpointed"], first["lost_gpu_seconds"]) == ("PREEMPTED", True, 0.0)
    assert first["gpu_indices"] == {"n1": [0, 1]} and first["notice_at"] and first["vacated_at"]
    assert second["node_names"] == ["n1", "n2"] and second["gpu_indices"] == {"n2": [3], "n1": [0]}
    assert [e["state"] for e in body["events"]] == ["PENDING", "RUNNING"]


def test_unknown_job_id_is_json_404(roles, api_as) -> None:
    response = api_as(roles.owner).get("/api/v1/jobs/999999/")
    assert response.status_code == 404 and response.json() == {"detail": "Not found."}


# --- cancel ----------------------------------------------------------------------------


def test_cancel_pending_job_cancels_it_at_once(roles, api_as, make_job) -> None:
    job = make_job(roles.owner)
    response = api_as(roles.owner).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 202 and response.json()["state"] == "CANCELLED"
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.ended_at is not None
    event = job.events.order_by("-id").first()
    assert (event.from_state, event.to_state, event.reason) == ("PENDING", "CANCELLED", "Cancelled")


@pytest.mark.parametrize("state", [JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING])
def test_cancel_running_job_asks_the_node_to_stop_it(roles, api_as, make_job, state) -> None:
    job = make_job(roles.owner, state)
    response = api_as(roles.owner).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 202 and response.json()["state"] == "CANCELLING"
    assert Job.objects.get(pk=job.pk).ended_at is None
    events = JobEvent.objects.filter(job=job).count()
    again = api_as(roles.owner).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert again.status_code == 202 and again.json()["state"] == "CANCELLING"
    assert JobEvent.objects.filter(job=job).count() == events


@pytest.mark.parametrize("state", [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT])
def test_cancel_finished_job_is_409(roles, api_as, make_job, state) -> None:
    job = make_job(roles.owner, state)
    response = api_as(roles.owner).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 409 and response.json()["state"] == state
    assert Job.objects.get(pk=job.pk).state == state


def test_staff_may_cancel_anyones_job(roles, api_as, make_job) -> None:
    job = make_job(roles.owner)
    assert api_as(roles.staff).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 202
    assert job.events.order_by("-id").first().message == "cancelled by carol"


# --- logs ------------------------------------------------------------------------------


def test_logs_of_latest_or_given_attempt_with_offset(roles, api_as, make_job) -> None:
    job = make_job(roles.owner, JobState.RUNNING)
    first = job.attempts.get()
    AttemptLog.objects.create(attempt=first, text="step 1\nstep 2")
    AttemptLog.objects.create(attempt=first, text="preempted")
    second = Attempt.objects.create(job=job, number=2, state="RUNNING")
    AttemptLog.objects.create(attempt=second, text="resumed at step 2")
    client = api_as(roles.owner)
    assert client.get(f"/api/v1/jobs/{job.pk}/logs/").json() == {
        "attempt": 2, "offset": 0, "lines": ["resumed at step 2"], "next_offset": 1, "total_lines": 1, "more": False}
    assert client.get(f"/api/v1/jobs/{job.pk}/logs/?attempt=1").json()["lines"] == ["step 1", "step 2", "preempted"]
    assert client.get(f"/api/v1/jobs/{job.pk}/logs/?attempt=1&offset=2").json()["lines"] == ["preempted"]
    assert client.get(f"/api/v1/jobs/{job.pk}/logs/?attempt=3").status_code == 404
    for bad in ("attempt=0", "attempt=x", "offset=-1", "limit=0", "limit=100001", "tail=0", "tail=x",
                "offset=1&tail=2"):
        response = client.get(f"/api/v1/jobs/{job.pk}/logs/?{bad}")
        assert response.status_code == 400 and bad.split("=")[-2].split("&")[-1] in response.json()["errors"]


def test_a_long_log_comes_a_page_at_a_time_or_as_its_last_lines(roles, api_as, make_job) -> None:
    job = make_job(roles.owner, JobState.RUNNING)
    attempt = job.attempts.get()
    for first in range(0, 25_000, 1_000):  # 25 batches of 1,000 lines
        AttemptLog.objects.create(attempt=attempt, text="\n".join(f"line {n}" for n in range(first, first + 1_000)))
    client = api_as(roles.owner)
    url = f"/api/v1/jobs/{job.pk}/logs/"
    page = client.get(url).json()
    assert page["lines"] == [f"line {n}" for n in range(10_000)]  # the default limit
    assert (page["next_offset"], page["total_lines"], page["more"]) == (10_000, 25_000, True)
    page = client.get(url, {"offset": 12_345, "limit": 1_500}).json()
    assert page["lines"] == [f"line {n}" for n in range(12_345, 13_845)] and page["more"]
    page = client.get(url, {"offset": 24_990}).json()
    assert page["lines"] == [f"line {n}" for n in range(24_990, 25_000)] and not page["more"]
    page = client.get(url, {"tail": 3}).json()
    assert (page["offset"], page["lines"], page["more"]) == (24_997, ["line 24997", "line 24998", "line 24999"], False)
    assert client.get(url, {"offset": 30_000}).json()["lines"] == []


def test_logs_before_any_attempt_are_empty(roles, api_as, make_job) -> None:
    job = make_job(roles.owner)
    assert api_as(roles.owner).get(f"/api/v1/jobs/{job.pk}/logs/").json() == {
        "attempt": None, "offset": 0, "lines": [], "next_offset": 0, "total_lines": 0, "more": False}


# --- nodes ---------------------------------------------------------------------------


def test_nodes_show_gpus_and_only_visible_holders(roles, api_as, make_node, make_job) -> None:
    make_node("n1", 2)
    make_node("n2", 1, state="DRAINING")
    mine = make_job(roles.owner, JobState.RUNNING)
    theirs = make_job(roles.other, JobState.RUNNING)
    Gpu.objects.filter(node__name="n1", index=0).update(allocated_to=mine)
    Gpu.objects.filter(node__name="n1", index=1).update(allocated_to=theirs)

    def holders(user) -> list:  # noqa: ANN001
        nodes = api_as(user).get("/api/v1/nodes/").json()
        return [(n["name"], n["state"], n["free_gpus"], [(g["allocated"], g["allocated_to"]) for g in n["gpus"]])
                for n in nodes]

    assert holders(roles.owner) == [("n1", "UP", 0, [(True, mine.pk), (True, None)]),
                                    ("n2", "DRAINING", 1, [(False, None)])]
    assert holders(roles.staff)[0][3] == [(True, mine.pk), (True, theirs.pk)]


# --- schema and docs ---------------------------------------------------------------------


def test_openapi_schema_lists_the_api(client) -> None:
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    paths = set(schema["paths"])
    assert {"/api/v1/jobs/", "/api/v1/jobs/{id}/", "/api/v1/jobs/{id}/cancel/", "/api/v1/jobs/{id}/logs/",
            "/api/v1/quota/", "/api/v1/nodes/"} <= paths
    assert "tokenAuth" in schema["components"]["securitySchemes"]
    submit = schema["components"]["schemas"]["JobSubmitRequest"]["properties"]["num_gpus"]
    assert (submit["minimum"], submit["maximum"]) == (1, 64)


def test_docs_page_loads_only_local_assets(client) -> None:
    import re

    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(a.startswith("/static/") for a in assets)
    for asset in assets:
        assert client.get(asset).status_code == 200, asset


def test_unknown_api_path_is_json_404(roles, api_as) -> None:
    response = api_as(roles.owner).get("/api/v1/no-such-thing/")
    assert response.status_code == 404 and response.json() == {"detail": "Not found."}
    assert api_as(roles.owner).get("/api/v1/jobs/abc/").json() == {"detail": "Not found."}


def test_list_query_count_does_not_grow_with_the_page(roles, api_as, make_job, django_assert_max_num_queries) -> None:
    for _ in range(25):
        make_job(roles.owner, JobState.RUNNING)
    client = api_as(roles.owner)
    # token lookup and last-used write, count, page, attempts, events
    with django_assert_max_num_queries(7):
        body = client.get("/api/v1/jobs/").json()
    assert len(body["results"]) == 25 and all(len(j["attempts"]) == 1 for j in body["results"])


# "²" and "³" pass str.isdigit() but not int(): they were answered with a server error.
@pytest.mark.parametrize("value", ["", "0", "-3", "ten", "2.5", "²", "1³"])
def test_page_size_that_is_not_a_positive_integer_is_a_400_naming_it(roles, api_as, value) -> None:
    response = api_as(roles.owner).get(f"/api/v1/jobs/?page_size={value}")
    assert response.status_code == 400
    assert "page_size" in str(response.json())


@pytest.mark.parametrize("value", ["0", "x", "²", "٣"])
def test_a_page_number_that_is_not_a_positive_ascii_integer_is_not_found(roles, api_as, value) -> None:
    assert api_as(roles.owner).get(f"/api/v1/jobs/?page={value}").status_code == 404

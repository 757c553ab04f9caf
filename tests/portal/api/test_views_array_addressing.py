"""An array's id names every task, ``ID_INDEX`` one task: cancel, hold, release and a priority change
(as ``scancel 12`` and ``scancel 12_0`` in Slurm), the first task included."""

from __future__ import annotations

import pytest

from scheduler.models import Job, JobState, Quota

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def three_tasks(client) -> list[int]:  # noqa: ANN001
    body = {"array": "0-2", "jobs": [{"name": "t", "command": "echo %a"}]}
    return [j["id"] for j in client.post(f"{JOBS}array/", body, format="json").json()["jobs"]]


def test_the_first_task_by_its_index_is_cancelled_alone_and_the_array_s_id_cancels_the_rest(roles, api_as) -> None:
    client = api_as(roles.owner)
    ids = three_tasks(client)
    assert client.post(f"{JOBS}{ids[0]}_0/cancel/").status_code == 202
    assert [Job.objects.get(pk=i).state for i in ids] == ["CANCELLED", "PENDING", "PENDING"]
    assert client.post(f"{JOBS}{ids[0]}/cancel/").status_code == 202
    assert {Job.objects.get(pk=i).state for i in ids} == {"CANCELLED"}


def test_the_first_task_by_its_index_is_held_and_released_alone(roles, api_as) -> None:
    client = api_as(roles.owner)
    ids = three_tasks(client)
    assert client.post(f"{JOBS}{ids[0]}_0/hold/").json()["hold"] == "user"
    assert [Job.objects.get(pk=i).hold for i in ids] == ["user", "", ""]
    client.post(f"{JOBS}{ids[0]}/hold/")
    assert client.post(f"{JOBS}{ids[0]}_0/release/").json()["hold"] == ""
    assert [Job.objects.get(pk=i).hold for i in ids] == ["", "user", "user"]


def test_a_priority_change_on_the_array_s_id_reaches_every_waiting_task_and_on_a_task_that_task(
        roles, api_as) -> None:
    client = api_as(roles.owner)
    ids = three_tasks(client)
    Job.objects.filter(pk=ids[1]).update(state=JobState.RUNNING)
    response = client.patch(f"{JOBS}{ids[0]}/", {"priority": 7}, format="json")
    assert response.status_code == 200 and response.json()["priority"] == 7
    assert [Job.objects.get(pk=i).priority for i in ids] == [7, 0, 7]  # the running task keeps its own
    assert client.patch(f"{JOBS}{ids[0]}_2/", {"priority": 9}, format="json").json()["priority"] == 9
    assert client.patch(f"{JOBS}{ids[0]}_0/", {"priority": 8}, format="json").json()["priority"] == 8
    assert [Job.objects.get(pk=i).priority for i in ids] == [8, 0, 9]


def test_a_priority_out_of_range_for_an_array_changes_no_task(roles, api_as) -> None:
    client = api_as(roles.owner)
    ids = three_tasks(client)
    Quota.objects.create(user=roles.owner, max_priority=10)
    response = client.patch(f"{JOBS}{ids[0]}/", {"priority": 11}, format="json")
    assert response.status_code == 400 and "priority" in response.json()["errors"]
    assert [Job.objects.get(pk=i).priority for i in ids] == [0, 0, 0]


def test_another_user_s_array_answers_as_a_missing_one_by_id_and_by_index(roles, api_as) -> None:
    ids = three_tasks(api_as(roles.owner))
    other = api_as(roles.other)
    for ref in (f"{ids[0]}", f"{ids[0]}_0", f"{ids[0]}_2"):
        assert other.patch(f"{JOBS}{ref}/", {"priority": 5}, format="json").status_code == 404
        assert other.post(f"{JOBS}{ref}/cancel/").status_code == 404
        assert other.post(f"{JOBS}{ref}/hold/").status_code == 404
    assert {j.priority for j in Job.objects.all()} == {0} and {j.state for j in Job.objects.all()} == {"PENDING"}

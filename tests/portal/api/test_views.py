"""POST /api/v1/jobs/: what is accepted, what is refused (naming the field), and that refusals write nothing."""

from __future__ import annotations

import json

import pytest

from scheduler.models import Job, JobEvent, JobState

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"
VALID = {"name": "train-resnet", "command": "python train.py --epochs 3"}


def counts() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


def test_submit_creates_pending_job_with_defaults_and_submission_event(roles, api_as) -> None:
    response = api_as(roles.owner).post(URL, VALID, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    job = Job.objects.get(pk=body["id"])
    assert job.owner == roles.owner and job.state == JobState.PENDING
    assert (job.job_class, job.num_gpus, job.grace_period, job.time_limit, job.priority) == ("BE", 1, 30, None, 0)
    assert body["owner"] == "alice" and body["state"] == "PENDING" and body["attempts"] == []
    assert [(e["from_state"], e["state"]) for e in body["events"]] == [("", "PENDING")]
    assert set(body) >= {"id", "name", "owner", "command", "job_class", "num_gpus", "num_cpus", "mem_gb",
                         "grace_period", "time_limit", "priority", "state", "pending_reason", "pending_message",
                         "submitted_at", "started_at", "ended_at", "exit_code", "attempt_count", "attempts", "events"}


def test_submit_keeps_every_given_field(roles, api_as) -> None:
    payload = {**VALID, "job_class": "TE", "num_gpus": 2, "num_cpus": 3.5, "mem_gb": 12, "grace_period": 0,
               "time_limit": 600, "priority": -5}
    body = api_as(roles.owner).post(URL, payload, format="json").json()
    job = Job.objects.get(pk=body["id"])
    assert (job.job_class, job.num_gpus, job.num_cpus, job.mem_gb, job.grace_period, job.time_limit, job.priority) == (
        "TE", 2, 3.5, 12.0, 0, 600, -5)


BAD_PAYLOADS = [
    # (case, payload change, field the error must name)
    ("zero gpus", {"num_gpus": 0}, "num_gpus"),
    ("negative gpus", {"num_gpus": -3}, "num_gpus"),
    ("huge gpus", {"num_gpus": 10**12}, "num_gpus"),
    ("65 gpus", {"num_gpus": 65}, "num_gpus"),
    ("gpus as string", {"num_gpus": "2"}, "num_gpus"),
    ("gpus as fraction", {"num_gpus": 1.5}, "num_gpus"),
    ("gpus as bool", {"num_gpus": True}, "num_gpus"),
    ("gpus null", {"num_gpus": None}, "num_gpus"),
    ("unknown class", {"job_class": "XL"}, "job_class"),
    ("class lower case", {"job_class": "te"}, "job_class"),
    ("empty command", {"command": ""}, "command"),
    ("blank command", {"command": "  \n\t "}, "command"),
    ("command as list", {"command": ["python", "x.py"]}, "command"),
    ("name as number", {"name": 42}, "name"),
    ("name too long", {"name": "n" * 201}, "name"),
    ("negative cpus", {"num_cpus": -1}, "num_cpus"),
    ("cpus as string", {"num_cpus": "4"}, "num_cpus"),
    ("negative memory", {"mem_gb": -0.5}, "mem_gb"),
    ("negative grace", {"grace_period": -1}, "grace_period"),
    ("zero time limit", {"time_limit": 0}, "time_limit"),
    ("time limit as string", {"time_limit": "1h"}, "time_limit"),
    ("priority out of range", {"priority": 10**6}, "priority"),
    ("unknown field", {"gpus": 2}, "gpus"),
    ("unknown field with a typo", {"comand": "x"}, "comand"),
]


@pytest.mark.parametrize("case, change, field", BAD_PAYLOADS, ids=[c[0] for c in BAD_PAYLOADS])
def test_bad_field_is_a_400_naming_it_and_writes_nothing(roles, api_as, case, change, field) -> None:
    before = counts()
    response = api_as(roles.owner).post(URL, {**VALID, **change}, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in errors and all(isinstance(m, str) and m for m in errors[field])
    assert counts() == before


@pytest.mark.parametrize("missing", ["name", "command"])
def test_missing_required_field_is_named(roles, api_as, missing) -> None:
    payload = {k: v for k, v in VALID.items() if k != missing}
    response = api_as(roles.owner).post(URL, payload, format="json")
    assert response.status_code == 400
    assert missing in response.json()["errors"]
    assert Job.objects.count() == 0


def test_all_errors_are_reported_together(roles, api_as) -> None:
    response = api_as(roles.owner).post(URL, {"name": "x", "command": "", "num_gpus": 0, "extra": 1}, format="json")
    assert set(response.json()["errors"]) == {"command", "num_gpus", "extra"}


def test_body_that_is_not_an_object_is_refused(roles, api_as) -> None:
    response = api_as(roles.owner).post(URL, [VALID], format="json")
    assert response.status_code == 400
    assert "non_field_errors" in response.json()["errors"]
    assert Job.objects.count() == 0


def test_malformed_json_is_a_json_400(roles, api_as) -> None:
    response = api_as(roles.owner).post(URL, '{"name": "x", ', content_type="application/json")
    assert response.status_code == 400
    assert "detail" in response.json()
    assert Job.objects.count() == 0


def test_nan_is_refused(roles, api_as) -> None:
    response = api_as(roles.owner).post(URL, '{"name": "x", "command": "y", "num_cpus": NaN}',
                                        content_type="application/json")
    assert response.status_code == 400
    assert Job.objects.count() == 0


def test_form_encoded_body_is_unsupported(roles, api_as) -> None:
    response = api_as(roles.owner).post(URL, VALID)  # multipart, not JSON
    assert response.status_code == 415
    assert "detail" in response.json()


def test_oversized_payload_is_413_json_and_writes_nothing(roles, api_as) -> None:
    payload = {**VALID, "command": "x" * (64 * 1024)}
    response = api_as(roles.owner).post(URL, payload, format="json")
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]
    assert Job.objects.count() == 0


def test_payload_just_under_the_limit_reaches_validation(roles, api_as) -> None:
    # 60 KiB of command: within the body limit, above the command's own length limit.
    payload = {**VALID, "command": "x" * (60 * 1024)}
    response = api_as(roles.owner).post(URL, json.dumps(payload), content_type="application/json")
    assert response.status_code == 400
    assert "command" in response.json()["errors"]


class TestAgainstRegisteredNodes:
    """With nodes registered: TE jobs must fit one node, BE jobs all GPUs together."""

    @pytest.fixture(autouse=True)
    def nodes(self, make_node) -> None:
        make_node("n1", 4)
        make_node("n2", 8)

    def test_te_job_larger_than_any_node_is_refused(self, roles, api_as) -> None:
        response = api_as(roles.owner).post(URL, {**VALID, "job_class": "TE", "num_gpus": 9}, format="json")
        assert response.status_code == 400
        assert "largest node has 8" in response.json()["errors"]["num_gpus"][0]
        assert Job.objects.count() == 0

    def test_te_job_filling_the_largest_node_is_accepted(self, roles, api_as) -> None:
        response = api_as(roles.owner).post(URL, {**VALID, "job_class": "TE", "num_gpus": 8}, format="json")
        assert response.status_code == 201

    def test_be_job_spanning_nodes_is_accepted_up_to_the_total(self, roles, api_as) -> None:
        assert api_as(roles.owner).post(URL, {**VALID, "num_gpus": 12}, format="json").status_code == 201
        response = api_as(roles.owner).post(URL, {**VALID, "num_gpus": 13}, format="json")
        assert response.status_code == 400
        assert "12 GPUs in all" in response.json()["errors"]["num_gpus"][0]
        assert Job.objects.count() == 1


    def test_cpus_or_memory_no_node_can_give_with_the_gpus_are_refused_naming_the_field(self, roles, api_as) -> None:
        """The nodes have 32 CPUs and 256 GB each: a TE job gets one node, a BE job may spread over both."""
        client = api_as(roles.owner)
        refused = client.post(URL, {**VALID, "job_class": "TE", "num_gpus": 1, "num_cpus": 33}, format="json")
        assert refused.status_code == 400 and list(refused.json()["errors"]) == ["num_cpus"]
        assert "the most on a node with 1 GPU is 32" in refused.json()["errors"]["num_cpus"][0]
        memory = client.post(URL, {**VALID, "num_gpus": 12, "mem_gb": 1024}, format="json")
        assert memory.status_code == 400 and list(memory.json()["errors"]) == ["mem_gb"]
        assert Job.objects.count() == 0
        spread = client.post(URL, {**VALID, "num_gpus": 8, "num_cpus": 48, "mem_gb": 400}, format="json")
        assert spread.status_code == 201  # 6 CPUs and 50 GB per GPU: 5 GPUs on each node


def test_without_nodes_only_the_hard_bound_applies(roles, api_as) -> None:
    assert api_as(roles.owner).post(URL, {**VALID, "num_gpus": 64}, format="json").status_code == 201

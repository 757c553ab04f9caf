"""Permissions of the node page and the telemetry JSON: anonymous, owner, another user, staff; bad input."""

from __future__ import annotations

import time

import pytest

from cluster.telemetry_schema import check_report
from gputelemetry import services
from scheduler.models import JobState

pytestmark = [pytest.mark.django_db, pytest.mark.redis]
LOGIN = 302


@pytest.fixture
def setup(roles, make_node, make_job):  # noqa: ANN001, ANN201
    make_node("n1", 2)
    job = make_job(roles.owner, JobState.RUNNING)
    services.ingest("n1", check_report(time.time(), [{"i": 0, "uuid": "GPU-a", "util": 50}],
                                       [{"job_id": job.pk, "attempt": 1, "gpus": [0], "proc_mem": 1}]))
    return roles, job


@pytest.mark.parametrize("role, node_page, node_json, job_json", [
    ("anonymous", LOGIN, LOGIN, LOGIN), ("owner", 200, 200, 200), ("other", 200, 200, 404), ("staff", 200, 200, 200),
])
def test_permission_matrix(setup, browser_as, role, node_page, node_json, job_json) -> None:  # noqa: ANN001
    roles, job = setup
    client = browser_as(None if role == "anonymous" else getattr(roles, role))
    assert client.get("/cluster/nodes/n1/").status_code == node_page
    assert client.get("/cluster/nodes/n1/telemetry.json").status_code == node_json
    answer = client.get(f"/jobs/{job.pk}/telemetry.json")
    assert answer.status_code == job_json
    if job_json == 200:
        assert answer.json()["attempt"] == 1
    assert client.post("/cluster/nodes/n1/telemetry.json").status_code in (LOGIN, 405)


def test_unknown_nodes_and_jobs_and_hostile_windows(setup, browser_as) -> None:  # noqa: ANN001
    roles, job = setup
    client = browser_as(roles.owner)
    assert client.get("/cluster/nodes/nope/").status_code == 404
    assert client.get("/cluster/nodes/%3Cscript%3E/telemetry.json").status_code == 404
    assert client.get("/jobs/999999/telemetry.json").status_code == 404
    assert client.get("/cluster/nodes/n1/telemetry.json?window=-1e999").json()["window"] == 900
    page = client.get("/cluster/nodes/n1/")
    assert b"GPU-a" in page.content and b"plotly.min.js" in page.content


def test_the_job_page_has_a_telemetry_section(setup, browser_as) -> None:  # noqa: ANN001
    roles, job = setup
    page = browser_as(roles.owner).get(f"/jobs/{job.pk}/")
    assert f"/jobs/{job.pk}/telemetry.json".encode() in page.content


@pytest.fixture
def redis_down(monkeypatch):  # noqa: ANN001, ANN201
    """The telemetry store's client pointed at a port where nothing listens."""
    import redis

    monkeypatch.setattr(services, "_client", redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5))


def test_pages_and_metrics_stay_up_while_the_store_is_unreachable(setup, browser_as, redis_down,  # noqa: ANN001
                                                                  settings, client, caplog) -> None:  # noqa: ANN001
    roles, job = setup
    owner = browser_as(roles.owner)
    page = owner.get("/cluster/nodes/n1/")
    assert page.status_code == 200 and b"cannot be read right now" in page.content
    node = owner.get("/cluster/nodes/n1/telemetry.json").json()
    assert node["unavailable"] is True and [g["latest"] for g in node["gpus"]] == [None, None]
    assert owner.get(f"/jobs/{job.pk}/telemetry.json").json() == {"attempt": None, "window": 900, "series": None,
                                                                   "unavailable": True}
    settings.METRICS_TOKEN = "scrape"
    metrics = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape")
    assert metrics.status_code == 200
    assert b"gpusched_gpu_healthy{" in metrics.content and b"DCGM_FI_DEV_GPU_UTIL{" not in metrics.content
    assert "not read" in caplog.text and "left out of /metrics" in caplog.text


def test_readings_are_there_when_the_store_answers(setup, browser_as) -> None:  # noqa: ANN001
    roles, job = setup
    node = browser_as(roles.owner).get("/cluster/nodes/n1/telemetry.json").json()
    assert node["unavailable"] is False and node["gpus"][0]["latest"]["uuid"] == "GPU-a"

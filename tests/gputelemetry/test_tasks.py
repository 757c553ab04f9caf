"""REPORT_TELEMETRY on the server: authenticated and checked like every report; hostile ones store nothing."""

from __future__ import annotations

import pytest

from cluster import protocol
from gputelemetry import store, tasks

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

GPU = {"i": 0, "uuid": "GPU-0", "util": 12.5, "fb_used": 10, "fb_total": 100, "temp": 40, "power": 90}


def test_the_task_is_registered_under_the_protocol_name() -> None:
    from portal.celery import app

    assert protocol.REPORT_TELEMETRY in app.tasks


def test_a_report_is_stored_and_fields_of_a_newer_agent_are_ignored(telemetry_redis) -> None:  # noqa: ANN001
    tasks.telemetry.apply(kwargs={"node": "n1", "token": "", "sampled_at": 1.7e9, "gpus": [GPU], "jobs": [],
                                  "nvlink": {"x": 1}, "protocol_version": protocol.PROTOCOL_VERSION})
    assert telemetry_redis.hget(store.latest_key("n1"), "0") is not None


@pytest.mark.parametrize("fields", [{"gpus": [{**GPU, "util": -5}]}, {"gpus": "x" * 100}, {"sampled_at": "now"},
                                    {"node": "../../etc"}, {"protocol_version": 99}])
def test_hostile_reports_are_dropped(telemetry_redis, fields, caplog) -> None:  # noqa: ANN001
    tasks.telemetry.apply(kwargs={"node": "n1", "token": "", "sampled_at": 1.7e9, "gpus": [GPU], "jobs": [], **fields})
    assert not list(telemetry_redis.scan_iter(match=f"{store.PREFIX}:*"))
    assert "cluster.telemetry from node" in caplog.text


def test_a_wrong_agent_token_is_refused(telemetry_redis, settings) -> None:  # noqa: ANN001
    settings.AGENT_TOKEN = "s3cret"
    tasks.telemetry.apply(kwargs={"node": "n1", "token": "wrong", "sampled_at": 1.7e9, "gpus": [GPU], "jobs": []})
    assert not list(telemetry_redis.scan_iter(match=f"{store.PREFIX}:*"))
    tasks.telemetry.apply(kwargs={"node": "n1", "token": "s3cret", "sampled_at": 1.7e9, "gpus": [GPU], "jobs": []})
    assert telemetry_redis.hget(store.latest_key("n1"), "0") is not None

"""A submission or cancellation enqueues one scheduling cycle on the real broker, after commit only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from portal.celery import app
from scheduler.triggers import (
    FORECAST_LEADING_KEY, FORECAST_TASK, FORECAST_TRAILING_KEY, LEADING_KEY, RUN_CYCLE_TASK, TRAILING_KEY,
    request_forecasts, request_scheduling,
)

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def broker(redis_url: str, settings) -> Iterator[redis.Redis]:  # noqa: ANN001
    """The configured broker (the test Redis), whose default queue must start empty; scheduling on."""
    if app.conf.broker_url != redis_url:
        pytest.fail(f"the portal's broker {app.conf.broker_url} is not the test Redis {redis_url}; "
                    "set REDIS_URL only (not CELERY_BROKER_URL or TEST_REDIS_URL)", pytrace=False)
    settings.SCHEDULER_AUTORUN = True
    client = redis.Redis.from_url(redis_url)
    client.delete(LEADING_KEY, TRAILING_KEY, FORECAST_LEADING_KEY, FORECAST_TRAILING_KEY)  # no window left over
    queue = app.conf.task_default_queue
    if client.llen(queue):  # never empty a queue that something else fills
        pytest.fail(f"queue {queue!r} at {redis_url} already holds messages; give the tests a Redis db of their own "
                    "(REDIS_URL=redis://host:6379/N)", pytrace=False)
    yield client
    client.delete(queue, LEADING_KEY, TRAILING_KEY, FORECAST_LEADING_KEY, FORECAST_TRAILING_KEY)


def queued_tasks(client: redis.Redis) -> list[str]:
    return [json.loads(raw)["headers"]["task"] for raw in client.lrange(app.conf.task_default_queue, 0, -1)]


def test_request_scheduling_enqueues_run_cycle(broker) -> None:
    assert request_scheduling() is True
    assert queued_tasks(broker) == [RUN_CYCLE_TASK]


def test_nothing_is_enqueued_when_autorun_is_off(broker, settings) -> None:
    settings.SCHEDULER_AUTORUN = False
    assert request_scheduling() is False
    assert queued_tasks(broker) == []


def test_submit_and_cancel_enqueue_on_commit(broker, roles, api_as, django_capture_on_commit_callbacks) -> None:
    client = api_as(roles.owner)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job_id = client.post("/api/v1/jobs/", {"name": "x", "command": "y"}, format="json").json()["id"]
    assert queued_tasks(broker) == []  # not before the transaction commits
    for callback in callbacks:
        callback()
    assert queued_tasks(broker) == [RUN_CYCLE_TASK]
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert queued_tasks(broker) == [RUN_CYCLE_TASK, RUN_CYCLE_TASK]  # nobody chose notifications: no dispatch task


def test_refused_submission_enqueues_nothing(broker, roles, api_as, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = api_as(roles.owner).post("/api/v1/jobs/", {"name": "x", "command": ""}, format="json")
    assert response.status_code == 400 and callbacks == []
    assert queued_tasks(broker) == []


def test_unreachable_broker_is_logged_not_raised() -> None:
    """In a fresh process whose broker is a closed port: False and a warning, no exception."""
    env = {**os.environ, "REDIS_URL": "redis://127.0.0.1:1/0", "SCHEDULER_AUTORUN": "1",
           "DJANGO_SETTINGS_MODULE": "portal.settings", "SECRET_KEY": "test-only", "CELERY_BROKER_URL": ""}
    code = "import django; django.setup(); from scheduler.triggers import request_scheduling as r; print(r())"
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"
    assert "could not enqueue scheduler.run_cycle" in result.stderr


def queued_messages(client: redis.Redis) -> list[dict]:
    """Headers of the queued messages, oldest first (the Redis transport pushes on the left)."""
    return [json.loads(raw)["headers"] for raw in reversed(client.lrange(app.conf.task_default_queue, 0, -1))]


def test_a_burst_of_requests_sends_one_message_now_and_one_delayed(broker, monkeypatch) -> None:
    from scheduler import triggers

    # One window spans the whole burst however slow the machine is (a busy one took over 0.2 s for 50 calls).
    monkeypatch.setattr(triggers, "DEBOUNCE_S", 60.0)
    sent = [request_scheduling() for _ in range(50)]
    assert sent[:2] == [True, True] and not any(sent[2:])
    headers = queued_messages(broker)
    assert [h["task"] for h in headers] == [RUN_CYCLE_TASK, RUN_CYCLE_TASK]
    assert headers[0]["eta"] is None  # the first request is served at once
    assert headers[1]["eta"] is not None  # the delayed one runs after the window, covering the rest


def test_a_request_after_the_window_sends_again(broker, monkeypatch) -> None:
    from scheduler import triggers

    monkeypatch.setattr(triggers, "DEBOUNCE_S", 0.05)
    assert request_scheduling() is True
    broker.delete(LEADING_KEY, TRAILING_KEY)  # the window has passed (keys expired)
    assert request_scheduling() is True
    assert [h["eta"] for h in queued_messages(broker)] == [None, None]


def test_redis_unavailable_for_the_debounce_still_sends(broker, monkeypatch) -> None:
    from scheduler import coordination

    class Broken:
        def set(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise redis.ConnectionError("down")

    monkeypatch.setattr(coordination, "redis_client", lambda: Broken())
    assert [request_scheduling() for _ in range(3)] == [True, True, True]
    assert queued_tasks(broker) == [RUN_CYCLE_TASK] * 3


def test_forecast_requests_are_debounced_on_their_own_keys(broker) -> None:
    sent = [request_forecasts() for _ in range(20)]
    assert sent[:2] == [True, True] and not any(sent[2:])
    headers = queued_messages(broker)
    assert [h["task"] for h in headers] == [FORECAST_TASK, FORECAST_TASK]
    assert headers[0]["eta"] is None and headers[1]["eta"] is not None
    assert request_scheduling() is True  # the cycle's own window is untouched


def test_no_forecast_request_when_autorun_is_off(broker, settings) -> None:
    settings.SCHEDULER_AUTORUN = False
    assert request_forecasts() is False
    assert queued_tasks(broker) == []

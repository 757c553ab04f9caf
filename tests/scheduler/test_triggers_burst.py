"""A burst of API submissions: a few scheduling messages, not one per job, and every job still decided."""

from __future__ import annotations

import pytest

from scheduler import coordination, loop, triggers
from scheduler.models import Job, JobState
from tests.support.live_helpers import make_node

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

BURST = 40


@pytest.fixture
def messages(redis_url, settings, monkeypatch) -> list[float]:  # noqa: ANN001
    """The test Redis for the debounce and the loop; run_cycle messages recorded (their countdown) instead of sent."""
    settings.REDIS_URL = redis_url
    settings.SCHEDULER_AUTORUN = True
    client = coordination.redis_client()
    keys = (triggers.LEADING_KEY, triggers.TRAILING_KEY, triggers.FORECAST_LEADING_KEY, triggers.FORECAST_TRAILING_KEY,
            loop.REQUEST_KEY, loop.LOCK_KEY)
    client.delete(*keys)
    # One debounce window spans the whole burst however slow the machine is: with the real 0.2 s, how many
    # windows 40 requests take depends on the machine's load, and so would the count of messages.
    monkeypatch.setattr(triggers, "DEBOUNCE_S", 60.0)
    sent: list[float] = []
    # Forecast requests (after each cycle) are not scheduling messages: not counted.
    monkeypatch.setattr(triggers, "_send", lambda countdown, task=triggers.RUN_CYCLE_TASK:
                        (task != triggers.RUN_CYCLE_TASK or sent.append(countdown)) or True)
    yield sent
    client.delete(*keys)


def test_burst_sends_few_messages_and_every_job_gets_a_decision(roles, api_as, messages,
                                                                django_capture_on_commit_callbacks) -> None:
    make_node("n1", 4)
    client = api_as(roles.owner)
    for i in range(BURST):
        with django_capture_on_commit_callbacks(execute=True):  # each request commits on its own
            response = client.post("/api/v1/jobs/", {"name": f"burst-{i}", "command": "true"}, format="json")
        assert response.status_code == 201
    assert messages == [0, 60.0]  # the first submission is served at once, one delayed message covers the rest
    for _ in messages:  # the worker serves each message
        loop.run_requested_cycles()
    jobs = Job.objects.filter(name__startswith="burst-")
    assert jobs.count() == BURST
    undecided = jobs.filter(state=JobState.PENDING, pending_reason="")
    assert not undecided.exists(), list(undecided.values_list("name", flat=True))
    assert jobs.exclude(state=JobState.PENDING).count() == 4  # the node's four GPUs were given out

"""A burst of submissions through the REST API of a real server (daphne, PostgreSQL, Redis, a Celery
worker running the scheduling loop): every accepted job is stored exactly once and gets a decision
from the loop. The 10,000-submission version with the sustained rate is benchmarks/api_submit_rate.py."""

from __future__ import annotations

import pytest

from scheduler.models import ACTIVE_STATES, Job, JobState
from tests.adversarial.load import audit, burst
from tests.adversarial.stack import wait_for
from tests.support.live_helpers import allocation_problems, make_node, make_user

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

SUBMISSIONS = 1000
CLIENTS = 4


def test_a_burst_of_submissions_is_stored_exactly_once_and_every_job_gets_a_decision(live_stack) -> None:
    from portal.models import ApiToken

    users = [make_user(f"load{i}") for i in range(3)]
    tokens = [ApiToken.issue(u, "load")[1] for u in users]
    for name in ("n1", "n2"):
        make_node(name, 8)
    # No agents: the nodes stay UP (no node-lost tick) and started jobs stay STARTING.
    live_stack.settings.update({"SCHEDULER_AUTORUN": "1", "SCHEDULER_TICK_SECONDS": "1",
                                "AGENT_HEARTBEAT_SECONDS": "3600"})
    live_stack.portal()
    live_stack.worker()

    result = burst(live_stack.base_url, tokens, SUBMISSIONS, CLIENTS)
    assert result.errors == [] and set(result.statuses) == {201}, (result.statuses, result.errors[:5])
    assert len(result.accepted) == SUBMISSIONS
    rows = list(Job.objects.filter(name__startswith="load-").values_list("id", "name"))
    assert audit(rows, result) == []

    def undecided() -> int:
        return Job.objects.filter(name__startswith="load-", state=JobState.PENDING, pending_reason="").count()

    wait_for(lambda: undecided() == 0, "every job to get a decision from the scheduling loop", timeout=300)
    # Started jobs hold the cluster's 16 GPUs, each GPU once (a TE job arriving later may have had a
    # BE job preempted for it: with no agents to confirm, that one stays PREEMPTING on its GPU).
    holding = Job.objects.filter(state__in=ACTIVE_STATES)
    assert sum(holding.values_list("num_gpus", flat=True)) == 16
    assert allocation_problems() == []
    waiting = Job.objects.filter(state=JobState.PENDING).exclude(pending_reason="").count()
    assert holding.count() + waiting == SUBMISSIONS

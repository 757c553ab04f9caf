"""Idle reclaim with real processes: a TE job whose simulated GPU stays idle while another job waits is
warned (event and log line), then ended with IDLE_RECLAIMED; a busy TE job beside it is left alone."""

from __future__ import annotations

import json

import pytest

from cluster.models import GpuPolicy
from scheduler.models import Attempt, Job, JobEvent, JobState
from tests.e2e.conftest import PY, wait_until
from tests.support.live_helpers import log_lines, make_user, submit

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

SLEEP = f"{PY} -c 'import time; time.sleep(120)'"


def test_an_idle_te_job_is_warned_then_reclaimed_and_a_busy_one_is_not(live) -> None:
    GpuPolicy.objects.create(pk=1, idle_util_threshold=5.0, idle_after_s=2, idle_grace_s=3)
    agent = live.start_agent("i", 3, extra=("--telemetry-interval", "0.5"))
    live.wait_nodes_up(agent)
    alice = make_user("alice")
    idle = submit(alice, "idle notebook", command=SLEEP, num_gpus=1, job_class="TE", grace_period=1)
    busy = submit(alice, "busy notebook", command=SLEEP, num_gpus=1, job_class="TE", grace_period=1)
    (agent.workdir / "simulated-gpus.json").write_text(json.dumps({"jobs": {str(idle.pk): {"util": 0}}}))
    for job in (idle, busy):
        wait_until(lambda job=job: Job.objects.filter(pk=job.pk, state=JobState.RUNNING).exists(), f"job {job.pk} to run")
    waiting = submit(alice, "needs three", command=SLEEP, num_gpus=3, job_class="BE")

    warning = wait_until(lambda: JobEvent.objects.filter(job=idle, reason="IdleWarning").first(), "the idle warning")
    assert "IDLE_RECLAIMED" in warning.message and "will not restart" in warning.message
    wait_until(lambda: Job.objects.filter(pk=idle.pk, state=JobState.CANCELLED).exists(), "the idle job to end")
    assert JobEvent.objects.filter(job=idle).latest("id").reason == "IDLE_RECLAIMED"
    log = log_lines(Attempt.objects.get(job=idle, number=1))
    assert any(line.startswith("[gpusched] idle:") for line in log)

    busy.refresh_from_db()
    waiting.refresh_from_db()
    assert busy.state == JobState.RUNNING and waiting.state == JobState.PENDING
    assert not JobEvent.objects.filter(job=busy, reason="IdleWarning").exists()

"""Reconfiguration end to end: a real worker running the ``rubick`` policy, a real agent, and the
example training job. The job starts on one GPU (the other is taken), is grown to two when that
GPU frees up, checkpoints on SIGTERM like a preempted job, and resumes with its new GPU count and
accumulation steps without repeating a step."""

from __future__ import annotations

import pytest

from scheduler import services as job_services
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState
from tests.e2e.conftest import train_command, wait_until
from tests.e2e.test_live_cluster import attempt_lines, resumed_at, steps, wait_line, wait_state
from tests.support.live_helpers import allocation_problems, make_user, submit

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis, pytest.mark.worker_env(SCHEDULER_POLICY="rubick")]


def test_rubick_grows_a_training_job_through_the_checkpoint_path(perf_model_traces, live) -> None:
    a = live.start_agent("a", 2)
    live.wait_nodes_up(a)
    alice = make_user("alice")
    blocker = submit(alice, "blocker", command=train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.05), grace_period=2)
    wait_state(blocker, JobState.RUNNING)

    # The job reports its steps, so Rubick grows it only if the work left pays for a restart (60 s):
    # bert's 0.37 s per step on 2 GPUs against about twice that on one needs more than ~185 steps left.
    total = 400
    job = submit(alice, "bert", command=train_command(TRAIN_STEPS=total, TRAIN_SLEEP=0.03), num_gpus=2,
                 model="bert", plan="ga", min_gpus=1, max_gpus=2, grace_period=10)
    wait_state(job, JobState.RUNNING)
    first_lines = wait_line(job, 1, "step 5/")
    assert first_lines[0] == "plan ga on 1 GPU, 2 accumulation steps: micro-batch 32, global batch 64"

    job_services.cancel_job(Job.objects.get(pk=blocker.pk), alice)  # its GPU frees up: Rubick grows the job
    job = wait_state(job, JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
    assert job.state == JobState.COMPLETED, list(JobEvent.objects.filter(job=job).values_list("to_state", "message"))
    assert (job.reconfiguration_count, job.preemption_count, job.attempt_count) == (1, 0, 2)
    event = JobEvent.objects.get(job=job, to_state=JobState.PREEMPTING)
    assert event.reason == "Reconfigured" and event.message.startswith("ga on 1 GPU -> ga on 2 GPUs")

    first, second = Attempt.objects.filter(job=job).order_by("number")
    assert (first.state, first.plan, first.gpu_count, first.grad_accum_steps) == (AttemptState.RECONFIGURED, "ga", 1, 2)
    assert first.notice_reason == "reconfigure" and first.checkpointed is True and first.exit_code == 143
    assert (second.state, second.plan, second.gpu_count, second.grad_accum_steps) == (AttemptState.COMPLETED, "ga", 2, 1)

    before = steps(attempt_lines(job, 1))
    after_lines = wait_line(job, 2, "done step=")
    k = resumed_at(after_lines)
    assert after_lines[1] == "plan ga on 2 GPUs, 1 accumulation step: micro-batch 32, global batch 64"
    assert before == list(range(1, k + 1))  # attempt 1 stopped after step k and checkpointed there
    assert steps(after_lines) == list(range(k + 1, total + 1))  # attempt 2 went on from k + 1: nothing repeated
    wait_until(lambda: Job.objects.filter(pk=blocker.pk, state=JobState.CANCELLED).exists(), "the blocker to end")
    assert allocation_problems() == []

"""An adaptive (Pollux) job end to end: a real worker running the ``pollux`` policy, a real agent, and
the example training job declaring the cifar10 profile. The job starts on one GPU with the batch the
profile gives one GPU at epoch 0, reports its epochs, is grown to two GPUs through the checkpoint
path, and resumes with the batch the scheduler chose for two GPUs at the epoch it had reached,
without repeating a step."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import adaptive_jobs
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState
from tests.e2e.conftest import train_command
from tests.e2e.test_live_cluster import attempt_lines, resumed_at, steps, wait_line, wait_state
from tests.scheduler.sim.workloads.pollux_traces import pollux_root
from tests.support.live_helpers import allocation_problems, make_user, submit

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis, pytest.mark.worker_env(SCHEDULER_POLICY="pollux", SCHEDULER_RECLAIM_MIN_RUNTIME="5")]


def test_pollux_grows_an_adaptive_job_and_changes_its_batch(live) -> None:
    pollux_root()  # skips without the study's profiles
    adaptive_jobs.reset_cache()
    alice = make_user("alice")
    total = 300
    job = submit(alice, "cifar10", command=train_command(TRAIN_STEPS=total, TRAIN_SLEEP=0.05, TRAIN_STEPS_PER_EPOCH=5),
                 num_gpus=1, max_gpus=2, adaptive_app="cifar10", grace_period=10)
    # A job that has waited an hour (no node was up): Pollux's restart penalty no longer outweighs a
    # second GPU once it has run the minimum runtime (5 s here) on its first.
    Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(hours=1))
    a = live.start_agent("a", 2)
    live.wait_nodes_up(a)
    wait_state(job, JobState.RUNNING)
    first_lines = wait_line(job, 1, "step 5/")
    assert first_lines[0] == "plan ga on 1 GPU, 1 accumulation step: micro-batch 128, global batch 128"

    job = wait_state(job, JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
    assert job.state == JobState.COMPLETED, list(JobEvent.objects.filter(job=job).values_list("to_state", "message"))
    assert job.reconfiguration_count == 1 and job.preemption_count == 0 and job.attempt_count == 2
    event = JobEvent.objects.get(job=job, to_state=JobState.PREEMPTING)
    assert event.reason == "Reconfigured" and event.message.startswith("ga on 1 GPU -> ga on 2 GPUs: pollux")

    first, second = Attempt.objects.filter(job=job).order_by("number")
    assert (first.state, first.gpu_count, first.batch_size) == (AttemptState.RECONFIGURED, 1, 128)
    assert first.checkpointed is True and first.exit_code == 143
    assert (second.state, second.gpu_count) == (AttemptState.COMPLETED, 2)
    before = steps(attempt_lines(job, 1))
    after_lines = wait_line(job, 2, "done step=")
    k = resumed_at(after_lines)
    model = adaptive_jobs.model_for(job)
    # The batch for two GPUs at the epoch the job had reported when it was relaunched (at most k / 5).
    choices = {adaptive_jobs.configuration(model, {"a": 2}, e): e for e in range(0, k // 5 + 1)}
    found = [c for c in choices if c[2] == second.batch_size]
    assert found, (second.batch_size, sorted(choices))
    local, accum, batch = found[0]
    assert second.grad_accum_steps == accum
    assert after_lines[1] == (f"plan ga on 2 GPUs, {accum} accumulation step{'s' if accum != 1 else ''}: "
                              f"micro-batch {-(-batch // (2 * accum))}, global batch {batch}")
    assert before == list(range(1, k + 1))  # attempt 1 stopped after step k and checkpointed there
    assert steps(after_lines) == list(range(k + 1, total + 1))  # attempt 2 went on from k + 1: nothing repeated
    assert allocation_problems() == []

"""The live cluster end to end: real Redis, a real Celery worker with beat, two real agents
with virtual GPUs, and the real example training job (examples/train_numpy.py)."""

from __future__ import annotations

import pytest

from cluster.models import Gpu, Node, NodeState
from cluster.protocol import ENV_ATTEMPT
from scheduler import services as job_services
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState
from tests.e2e.conftest import group_alive, job_groups, reference_digest, train_command, wait_until
from tests.support.live_helpers import allocation_problems, log_lines, make_user, submit

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]


def wait_state(job: Job, *states: str) -> Job:
    wait_until(lambda: Job.objects.filter(pk=job.pk, state__in=states).exists(), f"job {job.pk} to be {states}")
    job.refresh_from_db()
    return job


def attempt_lines(job: Job, number: int) -> list[str]:
    return log_lines(Attempt.objects.get(job=job, number=number))


def wait_line(job: Job, number: int, needle: str) -> list[str]:
    """The attempt's stored log once it has a line containing ``needle``."""
    return wait_until(lambda: (lines := attempt_lines(job, number)) and any(needle in ln for ln in lines) and lines,
                      f"'{needle}' in the log of job {job.pk} attempt {number}")


def steps(lines: list[str]) -> list[int]:
    """Step numbers of the example job's 'step N/M ...' lines, in order."""
    return [int(line.split()[1].split("/")[0]) for line in lines if line.startswith("step ")]


def resumed_at(lines: list[str]) -> int:
    (line,) = [ln for ln in lines if ln.startswith("resumed from checkpoint at step ")]
    return int(line.split()[5])


def path_of(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("at", "id").values_list("to_state", flat=True))


def test_submit_run_complete(live) -> None:
    a = live.start_agent("a", 2)
    b = live.start_agent("b", 2)
    live.wait_nodes_up(a, b)
    alice = make_user("alice")
    command = 'echo "visible=$CUDA_VISIBLE_DEVICES attempt=$GPUSCHED_ATTEMPT resume=$RESUME" && ' + train_command(
        TRAIN_STEPS=20, TRAIN_SLEEP=0.02)
    job = submit(alice, "hello", command=command, num_gpus=2, job_class="TE", grace_period=1)

    job = wait_state(job, JobState.COMPLETED, JobState.FAILED)
    assert job.state == JobState.COMPLETED and job.exit_code == 0
    assert path_of(job) == [JobState.PENDING, JobState.STARTING, JobState.RUNNING, JobState.COMPLETED]
    attempt = Attempt.objects.get(job=job)
    assert attempt.state == AttemptState.COMPLETED and attempt.pid
    assert attempt.gpu_allocation == {a.name: [0, 1]}  # best fit, ties broken by node name
    lines = wait_line(job, 1, "done step=20")
    assert lines[0] == "visible=0,1 attempt=1 resume=0"
    assert steps(lines) == list(range(1, 21))
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()

    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(alice)
    assert api.get(f"/api/v1/jobs/{job.pk}/logs/").json()["lines"] == lines


def test_te_job_preempts_the_policys_victim_which_resumes_without_repeating_work(live) -> None:
    """Four BE jobs fill the cluster; a TE job arrives. fitgpp picks the BE job with the
    shortest grace period; it checkpoints on SIGTERM, the TE job gets its GPU, and the
    victim later resumes from its checkpoint and ends with the weights of an
    uninterrupted run."""
    a = live.start_agent("a", 2)
    b = live.start_agent("b", 2)
    live.wait_nodes_up(a, b)
    alice = make_user("alice")
    total = 60
    be_command = train_command(TRAIN_STEPS=total, TRAIN_SLEEP=0.1)
    graces = [30, 3, 30, 30]
    be_jobs = [submit(alice, f"be{i}", command=be_command, grace_period=g) for i, g in enumerate(graces)]
    victim = be_jobs[1]
    for job in be_jobs:
        wait_state(job, JobState.RUNNING)
    wait_line(victim, 1, "step 5/")

    te = submit(alice, "te", job_class="TE", command=train_command(TRAIN_STEPS=10, TRAIN_SLEEP=0.02), grace_period=1)
    te = wait_state(te, JobState.COMPLETED, JobState.FAILED)
    assert te.state == JobState.COMPLETED
    for job in be_jobs:
        wait_state(job, JobState.COMPLETED, JobState.FAILED)

    victim.refresh_from_db()
    assert victim.state == JobState.COMPLETED and victim.preemption_count == 1
    assert [j.preemption_count for j in Job.objects.filter(pk__in=[j.pk for j in be_jobs]).order_by("pk")] == [0, 1, 0, 0]
    notice = JobEvent.objects.get(job=victim, to_state=JobState.PREEMPTING)
    assert notice.reason == "PreemptedForTE" and f"TE job {te.pk}" in notice.message

    first, second = Attempt.objects.filter(job=victim).order_by("number")
    assert first.state == AttemptState.PREEMPTED and first.preempted_for == te.pk
    assert first.checkpointed is True and first.lost_gpu_seconds == 0.0
    assert first.notice_at <= first.vacated_at and first.exit_code == 143
    assert second.state == AttemptState.COMPLETED
    te_attempt = Attempt.objects.get(job=te)
    assert te_attempt.gpu_allocation == first.gpu_allocation  # the TE job got the victim's GPU
    te_running = JobEvent.objects.get(job=te, to_state=JobState.RUNNING).at
    assert te_running >= first.vacated_at

    before = steps(attempt_lines(victim, 1))
    after_lines = wait_line(victim, 2, "done step=")
    after = steps(after_lines)
    k = resumed_at(after_lines)
    assert before == list(range(1, k + 1))  # attempt 1 stopped after step k, checkpointed there
    assert after == list(range(k + 1, total + 1))  # attempt 2 went on from k + 1: nothing repeated
    assert after_lines[-1].split("params_sha256=")[1] == reference_digest(total)
    assert allocation_problems() == []


def test_cancel_stops_the_process(live) -> None:
    a = live.start_agent("a", 1)
    live.wait_nodes_up(a)
    alice = make_user("alice")
    job = submit(alice, "long", command=train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.05), grace_period=5)
    wait_state(job, JobState.RUNNING)
    wait_line(job, 1, "step 3/")
    pgid = Attempt.objects.get(job=job).pid
    assert group_alive(pgid)

    job_services.cancel_job(job, alice)
    job = wait_state(job, JobState.CANCELLED)
    attempt = Attempt.objects.get(job=job)
    assert attempt.state == AttemptState.CANCELLED and attempt.notice_at is not None
    assert path_of(job)[-2:] == [JobState.CANCELLING, JobState.CANCELLED]
    wait_until(lambda: not group_alive(pgid), "the cancelled job's processes to be gone")
    assert any(line.startswith("checkpoint saved at step") for line in wait_line(job, 1, "checkpoint saved"))
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()


def test_the_time_limit_is_enforced_on_the_node(live) -> None:
    a = live.start_agent("a", 1)
    live.wait_nodes_up(a)
    alice = make_user("alice")
    job = submit(alice, "slow", command=train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.05), time_limit=2,
                 grace_period=5)
    job = wait_state(job, JobState.TIMEOUT, JobState.COMPLETED, JobState.FAILED)
    assert job.state == JobState.TIMEOUT
    attempt = Attempt.objects.get(job=job)
    assert attempt.state == AttemptState.TIMEOUT and attempt.notice_at is not None
    assert (attempt.notice_at - attempt.started_at).total_seconds() >= 2  # not before the limit
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()


def test_a_dead_node_s_jobs_are_requeued_and_finish_on_the_other_node(live) -> None:
    """The agent and its job processes are SIGKILLed (the machine died): after four missed
    heartbeats the node is NODE_LOST and the job resumes from its last periodic
    checkpoint on the other node."""
    a = live.start_agent("a", 1)
    b = live.start_agent("b", 1)
    live.wait_nodes_up(a, b)
    alice = make_user("alice")
    total = 40
    job = submit(alice, "j", command=train_command(TRAIN_STEPS=total, TRAIN_SLEEP=0.1, CHECKPOINT_EVERY=5))
    wait_state(job, JobState.RUNNING)
    assert list(Attempt.objects.get(job=job).gpu_allocation) == [a.name]
    wait_line(job, 1, "step 12/")

    live.kill_agent(a)
    assert live.kill_jobs_of(a)
    wait_until(lambda: Node.objects.filter(name=a.name, state=NodeState.NODE_LOST).exists(), "node a to be lost")
    job = wait_state(job, JobState.COMPLETED, JobState.FAILED)
    assert job.state == JobState.COMPLETED
    first, second = Attempt.objects.filter(job=job).order_by("number")
    assert first.state == AttemptState.NODE_LOST and first.lost_gpu_seconds > 0
    assert second.state == AttemptState.COMPLETED and list(second.gpu_allocation) == [b.name]
    assert JobState.NODE_LOST in path_of(job)
    lines = wait_line(job, 2, "done step=")
    k = resumed_at(lines)
    assert k % 5 == 0 and k >= 10  # the last periodic checkpoint before the crash
    assert steps(lines) == list(range(k + 1, total + 1))
    assert lines[-1].split("params_sha256=")[1] == reference_digest(total, CHECKPOINT_EVERY=5)


def test_an_agent_that_comes_back_is_reconciled_and_its_stale_job_killed(live) -> None:
    """Only the agent is SIGKILLed: its job keeps running, unseen. The node is declared
    lost and the job restarts on the other node; when the agent restarts it re-adopts
    the old process, registers and heartbeats, and the server has it kill the process
    as stale (AGENT_RECONCILE after registration, AGENT_KILL for an unexpected attempt
    in a heartbeat). The agent's own fencing (jobs kill themselves when their agent is
    gone too long) is turned off here: this is the server's backstop when it fails."""
    a = live.start_agent("a", 1, shared_checkpoints=False, extra=("--fence-after", "0"))
    b = live.start_agent("b", 1, shared_checkpoints=False)
    live.wait_nodes_up(a, b)
    alice = make_user("alice")
    # The first attempt steps slowly (a minute in all), so that it is still running, unseen, when
    # the server finds it: on a busy host the restart below can outlast a six-second job.
    slow_first = f'S=0.1; [ "${ENV_ATTEMPT}" = 1 ] && S=1; ' + train_command(TRAIN_STEPS=60, TRAIN_SLEEP="$S")
    job = submit(alice, "j", command=slow_first)
    wait_state(job, JobState.RUNNING)
    wait_line(job, 1, "step 3/")
    (stale_group,) = job_groups({a.name})

    live.kill_agent(a)
    wait_until(lambda: Attempt.objects.filter(job=job, number=2, state=AttemptState.RUNNING).exists(),
               "the job to run again on the other node")
    assert Node.objects.get(name=a.name).state == NodeState.NODE_LOST
    assert group_alive(stale_group)  # nobody has told the orphaned process yet

    live.start_agent("a", 1, shared_checkpoints=False)
    wait_until(lambda: not group_alive(stale_group), "the stale process to be killed after reconciliation")
    live.wait_nodes_up(a)
    job = wait_state(job, JobState.COMPLETED, JobState.FAILED)
    assert job.state == JobState.COMPLETED
    first, second = Attempt.objects.filter(job=job).order_by("number")
    assert first.state == AttemptState.NODE_LOST  # the late exit report of the stale process changed nothing
    assert list(second.gpu_allocation) == [b.name] and second.state == AttemptState.COMPLETED
    # Stopped as stale, by the reconcile after registration or by the heartbeat check, whichever came first.
    assert "reason=stale" in a.output()
    assert allocation_problems() == []

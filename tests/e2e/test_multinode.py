"""Multi-node jobs on the live cluster: two real agents of 2 virtual GPUs each, a job of 3 GPUs
that spans both, and what its ranks are told about each other (docs/agent.md, docs/live_cluster.md)."""

from __future__ import annotations

import pytest

from cluster.agent.config import default_advertise_address
from cluster.models import Gpu, Node, NodeState
from cluster.protocol import master_port
from scheduler.models import Attempt, AttemptState, Job, JobState
from tests.e2e.conftest import group_alive, job_groups, wait_until
from tests.support.live_helpers import log_lines, make_user, submit

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

# What every rank prints: the launcher variables it was given.
PRINT_RANK = ('echo "rank=$GPUSCHED_NODE_RANK nodes=$GPUSCHED_NODES num=$GPUSCHED_NUM_NODES '
              'master=$GPUSCHED_MASTER_ADDR:$GPUSCHED_MASTER_PORT '
              'torch=$MASTER_ADDR:$MASTER_PORT/$NNODES/$NODE_RANK visible=$CUDA_VISIBLE_DEVICES"')


def wait_state(job: Job, *states: str) -> Job:
    wait_until(lambda: Job.objects.filter(pk=job.pk, state__in=states).exists(), f"job {job.pk} to be {states}")
    job.refresh_from_db()
    return job


def rank_lines(job: Job, count: int) -> dict[str, tuple[str, str]]:
    """{rank: (the node its line is labelled with, its printed line)} once ``count`` ranks have
    printed into attempt 1's log."""
    def lines() -> dict[str, tuple[str, str]] | None:
        labelled = (ln.split(" ", 1) for ln in log_lines(Attempt.objects.get(job=job, number=1)))
        got = {text.split()[0]: (label.strip("[]"), text) for label, text in labelled if text.startswith("rank=")}
        return got if len(got) >= count else None

    return wait_until(lines, f"{count} ranks of job {job.pk} to print their environment")


def test_a_job_spanning_two_nodes_gets_ranks_node_list_and_one_master(live) -> None:
    a = live.start_agent("a", 2, extra=("--advertise-address", "a.multinode.test"))
    b = live.start_agent("b", 2)  # the default address
    live.wait_nodes_up(a, b)
    assert Node.objects.get(name=a.name).address == "a.multinode.test"
    assert Node.objects.get(name=b.name).address == default_advertise_address(b.name)

    job = submit(make_user("alice"), "spread", command=PRINT_RANK, num_gpus=3, job_class="BE", grace_period=1)
    job = wait_state(job, JobState.COMPLETED, JobState.FAILED)
    assert job.state == JobState.COMPLETED and job.exit_code == 0
    attempt = Attempt.objects.get(job=job)
    assert attempt.state == AttemptState.COMPLETED
    assert sorted(attempt.gpu_allocation) == [a.name, b.name]
    assert sum(len(v) for v in attempt.gpu_allocation.values()) == 3

    lines = rank_lines(job, 2)
    port = master_port(job.pk, 1, min(attempt.gpu_allocation[a.name]))  # keyed by rank 0's first GPU
    nodes = f"{a.name},{b.name}"  # rank order: names sorted
    for rank, node in enumerate((a.name, b.name)):
        visible = ",".join(str(i) for i in attempt.gpu_allocation[node])
        assert lines[f"rank={rank}"] == (node, (
            f"rank={rank} nodes={nodes} num=2 master=a.multinode.test:{port} "
            f"torch=a.multinode.test:{port}/2/{rank} visible={visible}"
        ))
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()


def test_one_rank_failing_stops_the_other_and_fails_the_job(live) -> None:
    """Rank 1 exits 1 at once: the server sends rank 0's node AGENT_KILL (reason stale, the job's
    grace period), rank 0's process group is stopped, and the job ends FAILED with rank 1's code."""
    a = live.start_agent("a", 2)
    b = live.start_agent("b", 2)
    live.wait_nodes_up(a, b)
    command = ('if [ "$GPUSCHED_NODE_RANK" = 1 ]; then sleep 1; echo "rank=1 failing"; exit 1; fi; '
               'echo "rank=0 up"; exec sleep 300')
    job = submit(make_user("bob"), "half-broken", command=command, num_gpus=3, job_class="BE", grace_period=1)

    wait_until(lambda: job_groups([a.name]), "rank 0's process on the first node")
    (rank0,) = job_groups([a.name])
    job = wait_state(job, JobState.COMPLETED, JobState.FAILED)
    assert job.state == JobState.FAILED and job.exit_code == 1
    attempt = Attempt.objects.get(job=job)
    assert attempt.state == AttemptState.FAILED and attempt.exit_code == 1
    # The job settles only once every node has vacated, so rank 0 is gone by now.
    assert not group_alive(rank0)
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()
    assert set(rank_lines(job, 2)) == {"rank=0", "rank=1"}


def test_a_node_lost_under_a_spanning_job_gives_the_surviving_rank_its_grace(live) -> None:
    """Node b's agent and its rank are SIGKILLed: once b is declared lost, rank 0 on a is sent SIGTERM
    with the job's grace (it says so and exits within it), keeps its GPUs until it has, and the job is
    requeued with the attempt counted as checkpointed."""
    a = live.start_agent("a", 2)
    b = live.start_agent("b", 2)
    live.wait_nodes_up(a, b)
    command = ('if [ "$GPUSCHED_NODE_RANK" = 0 ]; then trap \'echo "rank=0 saving on SIGTERM"; exit 0\' TERM; fi; '
               'echo "rank=$GPUSCHED_NODE_RANK up"; while true; do sleep 0.2; done')
    job = wait_state(submit(make_user("carol"), "spanning", command=command, num_gpus=3, job_class="BE",
                            grace_period=30), JobState.RUNNING)
    assert set(rank_lines(job, 2)) == {"rank=0", "rank=1"}
    assert job_groups([a.name]) and job_groups([b.name])

    live.kill_agent(b)
    assert live.kill_jobs_of(b)
    job = wait_state(job, JobState.PENDING)
    assert Node.objects.get(name=b.name).state == NodeState.NODE_LOST
    attempt = Attempt.objects.get(job=job, number=1)
    assert attempt.state == AttemptState.NODE_LOST
    assert attempt.notice_at is not None and attempt.checkpointed is True
    assert f"[{a.name}] rank=0 saving on SIGTERM" in log_lines(attempt)
    assert not job_groups([a.name]) and not Gpu.objects.filter(allocated_to__isnull=False).exists()

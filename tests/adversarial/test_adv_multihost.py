"""Faults between machines: the system spread over network-namespace hosts (tests/support/netns_cluster.py),
PostgreSQL and Redis on one, portal, worker and beat on another, one agent on each of the rest.

Every test submits recording jobs (tests/support/job_records.py) through the REST API, injects its
fault, waits for every job to finish and prints its counts: jobs submitted, finished, requeued, ran
twice at once (from the jobs' own records and from the server's Attempt rows) and lost; the last two
must be 0. Timings (heartbeat 1 s, fence 6 s, node lost after 8 s) are chosen so that CPU contention
on a shared machine cannot fake a partition; nothing here asserts how fast anything happened.
"""

from __future__ import annotations

import json
import time

import pytest
import requests

from tests.support.procs import job_groups
from tests.support.job_records import attempt_rows, overlaps_on_server, overlaps_recorded, recording_job, spans, tally
from tests.support.netns_cluster import NetnsCluster, netns_cluster  # noqa: F401 - fixture

pytestmark = [pytest.mark.e2e, pytest.mark.multihost]

WAIT = 180.0  # a guard against hanging, not a performance expectation


def wait(predicate, what: str, timeout: float = WAIT, interval: float = 0.25):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(interval)


def submit(cluster: NetnsCluster, name: str, steps: int, grace: int = 1) -> int:
    response = requests.post(f"{cluster.base_url}/api/v1/jobs/", json={
        "name": name, "command": recording_job(steps), "grace_period": grace},
        headers={"Authorization": f"Token {cluster.api_token}"}, timeout=30)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def job_states(cluster: NetnsCluster, job_ids: list[int]) -> dict[int, str]:
    return dict(cluster.sql("SELECT id, state FROM scheduler_job WHERE id = ANY(%s)", (job_ids,)))


def current_nodes(cluster: NetnsCluster, job_ids: list[int]) -> dict[int, list[str]]:
    """Nodes of each job's current attempt (its GPU allocation)."""
    rows = cluster.sql("SELECT j.id, a.gpu_allocation FROM scheduler_job j JOIN scheduler_attempt a "
                       "ON a.job_id = j.id AND a.number = j.attempt_count WHERE j.id = ANY(%s)", (job_ids,))
    return {job_id: sorted(allocation) for job_id, allocation in rows}


def report(name: str, counts: dict[str, int], **figures: object) -> None:
    print(f"\n[{name}] counts: {json.dumps(counts)}" + (f"\n[{name}] figures: {json.dumps(figures)}" if figures else ""))


def test_a_node_cut_off_is_declared_lost_its_jobs_fenced_with_grace_and_requeued_and_nothing_runs_twice(
        netns_cluster) -> None:  # noqa: F811
    """Four jobs run on three nodes (two GPUs each) while node1's link is cut. The server declares node1
    lost after the heartbeat grace and requeues its jobs on the free GPUs; node1's agent, cut off from
    the broker, gives its jobs SIGTERM (they save) and stops them before that. Healed, node1 comes back
    UP, its stale reports are reconciled, and every job completes; no job's attempts overlapped."""
    cluster = netns_cluster(agents=3, gpus=2)
    jobs = [submit(cluster, f"p{i}", steps=100) for i in range(4)]
    wait(lambda: list(job_states(cluster, jobs).values()).count("RUNNING") == 4, "four jobs to run")
    wait(lambda: all(spans(cluster.checkpoints, j) for j in jobs), "every job to record its first step")
    on = current_nodes(cluster, jobs)
    victim = max(cluster.node_names, key=lambda n: sum(nodes == [n] for nodes in on.values()))
    moved = [j for j, nodes in on.items() if nodes == [victim]]
    assert moved

    cut_at = time.time()
    cluster.net.cut(victim)
    wait(lambda: cluster.sql("SELECT state FROM cluster_node WHERE name = %s", (victim,))[0][0] == "NODE_LOST",
         f"{victim} to be declared lost")
    wait(lambda: not job_groups([victim], cluster.marker), f"{victim}'s agent to stop its jobs")
    wait(lambda: all(len(spans(cluster.checkpoints, j)) == 2 for j in moved), "the requeued jobs to run elsewhere")
    assert cluster.procs[victim].alive()  # it was cut off, not killed
    cluster.net.heal(victim)
    cluster.wait_nodes_up([victim])
    wait(lambda: set(job_states(cluster, jobs).values()) == {"COMPLETED"}, "every job to complete")

    agent_log = cluster.procs[victim].output()
    assert "broker unreachable: unless a heartbeat gets through first" in agent_log
    rows = attempt_rows(cluster.sql, jobs)
    for job_id in moved:
        first, second = spans(cluster.checkpoints, job_id)
        assert first.termed and not first.finished  # noticed with SIGTERM, saved, stopped by the fence
        assert first.nodes == {victim} and victim not in second.nodes and second.finished
        assert [(a[1], a[4]) for a in rows[job_id]][0] == ("NODE_LOST", [victim])
        assert rows[job_id][-1][1] == "COMPLETED"
    for job_id in set(jobs) - set(moved):
        assert [a[1] for a in rows[job_id]] == ["COMPLETED"]
    # After the heal the agent's queued reports (the fenced exits) were delivered and nothing is left over.
    state = json.loads((cluster.tmp / "agents" / victim / "agent-state.json").read_text())
    assert state["attempts"] == [] and state["outbox"] == []
    assert overlaps_recorded(cluster.checkpoints, jobs) == [] and overlaps_on_server(cluster.sql, jobs) == []

    counts = tally(cluster.sql, cluster.checkpoints, jobs)
    assert counts == {"submitted": 4, "finished": 4, "requeued": len(moved), "ran_twice_at_once": 0, "lost": 0}
    lost_at = min(rows[j][0][3] for j in moved)
    report("partition", counts, cut_node=victim, moved=len(moved),
           seconds_from_cut_to_last_step_on_cut_node=round(max(spans(cluster.checkpoints, j)[0].last for j in moved)
                                                           - cut_at, 2),
           seconds_from_cut_to_node_lost=round(lost_at - cut_at, 2),
           seconds_from_cut_to_restart_elsewhere=round(min(spans(cluster.checkpoints, j)[1].first for j in moved)
                                                       - cut_at, 2))

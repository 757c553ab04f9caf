"""Rotating the agent secret on a running multi-host cluster, as docs/security.md says to: the server
moves to a new GPUSCHED_AGENT_SECRET with the old one as a fallback, each node's Redis user takes both
passwords, agents are given their new token and Redis URL one at a time while jobs run and queue,
then the fallback is removed. No node is lost, no job requeued or run twice (a command signed in
the moment an agent switches is sent again when it registers), and afterwards the old
credentials are refused by the server and by Redis (tests/adversarial/test_adv_multihost.py has the
harness and the counts)."""

from __future__ import annotations

import pytest
import redis

from cluster import broker_acl, message_signing, protocol
from cluster.auth import node_token
from tests.adversarial.test_adv_multihost import job_states, report, submit, wait
from tests.support.job_records import attempt_rows, tally
from tests.support.netns_cluster import SECRET, NetnsCluster, netns_cluster  # noqa: F401 - fixture

pytestmark = [pytest.mark.e2e, pytest.mark.multihost]

NEW_SECRET = "netns-cluster-rotated-agent-secret-not-for-deployment"


def restart_server(cluster: NetnsCluster) -> None:
    """The portal, the worker and beat stopped and started on the cluster's current settings."""
    for name, start in (("worker", cluster.start_worker), ("beat", cluster.start_beat),
                        ("portal", cluster.start_portal)):
        cluster.procs[name].stop()
        start()


def test_the_agent_secret_is_rotated_under_load_without_losing_a_node_or_a_job(netns_cluster) -> None:  # noqa: F811
    cluster = netns_cluster(agents=2, gpus=2, spare_hosts=1)
    jobs = [submit(cluster, f"before{i}", steps=40) for i in range(5)]
    wait(lambda: list(job_states(cluster, jobs).values()).count("RUNNING") == 4, "four jobs to run")

    # 1. The server takes the new secret, the old one as a fallback; the nodes' Redis users both passwords.
    cluster.settings.update(GPUSCHED_AGENT_SECRET=NEW_SECRET, GPUSCHED_AGENT_SECRET_FALLBACKS=SECRET)
    restart_server(cluster)
    cluster._run_manage("broker_acl", "--apply", *cluster.node_names, "spare1")
    jobs.append(submit(cluster, "old-agents", steps=10))  # launched by agents still on their old tokens

    # 2. Each agent, in turn, gets its new token and Redis URL (SIGTERM: its jobs run on and are adopted).
    for name in cluster.node_names:
        connects = cluster.procs[name].output().count(f"consuming node.{name}")
        cluster.procs[name].stop()
        cluster.start_agent(name, secret=NEW_SECRET)
        wait(lambda: cluster.procs[name].output().count(f"consuming node.{name}") > connects,
             f"{name} to come back on its new credentials")
        jobs.append(submit(cluster, f"after-{name}", steps=10))

    # 3. The rotation ends: no fallback; the old passwords go.
    del cluster.settings["GPUSCHED_AGENT_SECRET_FALLBACKS"]
    restart_server(cluster)
    cluster._run_manage("broker_acl", "--apply", *cluster.node_names, "spare1")
    jobs += [submit(cluster, f"end{i}", steps=10) for i in range(2)]

    wait(lambda: set(job_states(cluster, jobs).values()) == {"COMPLETED"}, "every job to complete", timeout=300)
    counts = tally(cluster.sql, cluster.checkpoints, jobs)
    assert counts == {"submitted": len(jobs), "finished": len(jobs), "requeued": 0, "ran_twice_at_once": 0,
                      "lost": 0}
    assert all(len(rows) == 1 for rows in attempt_rows(cluster.sql, jobs).values())
    assert cluster.sql("SELECT count(*) FROM cluster_node WHERE state = 'UP'")[0][0] == len(cluster.node_names)
    # A command signed while an agent switched tokens may have been refused by it; it was sent again when
    # the agent registered (no job waited for the node-lost delay or was requeued: the counts above).
    refused = sum(cluster.procs[name].output().count("signature that does not verify") for name in cluster.node_names)

    # The old credentials are refused: by Redis, and by the server (a report signed with an old token).
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(broker_acl.node_url(cluster.redis_url, SECRET, "node1")).ping()
    old = node_token(SECRET, "node1")
    forged = message_signing.signed(old, protocol.REPORT_HEARTBEAT, {"node": "node1", "running": [],
                                                                     "protocol_version": protocol.PROTOCOL_VERSION}, 1.0)
    from celery import Celery

    Celery("rotation-test", broker=cluster.redis_url, set_as_current=False).send_task(
        protocol.REPORT_HEARTBEAT, kwargs=forged, queue=protocol.REPORT_QUEUE)
    wait(lambda: "from node 'node1' refused: its signature does not verify" in cluster.procs["worker"].output(),
         "the worker to refuse a report signed with an old token")
    report("secret-rotation", counts, nodes=len(cluster.node_names), commands_refused_during_the_switch=refused)

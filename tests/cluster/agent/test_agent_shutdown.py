"""An agent stopped with --kill-jobs-on-exit: it starts nothing more, and what it runs ends under its watch.

While its jobs use their grace periods the agent keeps reading commands: a
launch is refused and reported ended with reason ``agent-stop`` (the server
requeues the job) instead of being started or left in the queue for the next
agent, and the refused attempt is remembered so that a repeat of it never
starts. It keeps heartbeating and renewing its lease meanwhile, so a job
whose grace period is longer than the fence period is not fenced.
"""

from __future__ import annotations

import json
import signal

import pytest
from tests.cluster.agent.agent_testlib import wait_until

from cluster import protocol

pytestmark = pytest.mark.redis

# Touches "noticed" on SIGTERM, then keeps running until the test creates "go".
WAITS_FOR_GO = "trap 'touch noticed' TERM; while [ ! -e go ]; do sleep 0.05; done; echo finished"


def _queue_length(node) -> int:  # noqa: ANN001
    import redis

    client = redis.Redis.from_url(node.url)
    try:
        return client.llen(protocol.node_queue(node.name))
    finally:
        client.close()


def test_a_stopping_agent_refuses_a_launch_and_reports_it_for_requeueing(make_node):
    n = make_node("--kill-jobs-on-exit")
    n.start()
    n.launch("slow", 1, WAITS_FOR_GO, grace_period=300)
    n.reports.wait(protocol.REPORT_STARTED, job_id="slow")
    work = n.job_dir("slow") / "work"
    n.agent.send_signal(signal.SIGTERM)
    wait_until(lambda: (work / "noticed").exists(), what="the agent's notice to reach the running job")

    n.launch("late", 1, "sleep 300", grace_period=1)
    refused = n.reports.wait(protocol.REPORT_EXITED, job_id="late")
    assert refused["reason"] == protocol.EXIT_AGENT_STOP
    assert (refused["exit_code"], refused["signal"], refused["notice_at"], refused["checkpointed"]) == (None, None, None, False)
    assert any("is stopping" in line for line in n.reports.log_lines("late", 1))
    assert n.reports.all(protocol.REPORT_STARTED, job_id="late") == []
    assert _queue_length(n) == 0

    (work / "go").touch()
    assert n.agent.wait(timeout=60) == 0
    n.agent = None
    exited = n.reports.wait(protocol.REPORT_EXITED, job_id="slow")
    assert (exited["exit_code"], exited["reason"]) == (0, protocol.EXIT_AGENT_STOP)
    assert exited["notice_at"] is not None and exited["ended_at"] >= exited["notice_at"]
    assert not n.job_dir("late").joinpath("attempt-1.exit").exists()
    state = json.loads((n.workdir / "agent-state.json").read_text())
    assert state["attempts"] == [] and state["outbox"] == [] and state["newest"]["late"] == 1

    # The same launch delivered again (a redelivery, or a copy that reached the queue after the
    # agent stopped) is refused by the next agent on this work dir: it never runs as an orphan.
    n.start()
    n.launch("late", 1, "sleep 300", grace_period=1)
    n.launch("marker", 1, "true")
    n.reports.wait(protocol.REPORT_EXITED, job_id="marker")
    assert n.reports.all(protocol.REPORT_STARTED, job_id="late") == []


def test_a_job_stopping_at_shutdown_gets_its_grace_period_beyond_the_fence_period(make_node):
    n = make_node("--kill-jobs-on-exit", "--fence-after", "1")
    n.start()
    # After the notice, the job keeps running for about three fence periods, then exits on its own.
    n.launch("patient", 1, "trap 'touch noticed' TERM; while [ ! -e noticed ]; do sleep 0.05; done; "
                           "i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; echo survived", grace_period=300)
    n.reports.wait(protocol.REPORT_STARTED, job_id="patient")
    beats_before = len(n.reports.all(protocol.REPORT_HEARTBEAT))
    n.agent.send_signal(signal.SIGTERM)
    assert n.agent.wait(timeout=60) == 0
    n.agent = None
    exited = n.reports.wait(protocol.REPORT_EXITED, job_id="patient")
    assert (exited["exit_code"], exited["signal"], exited["reason"]) == (0, None, protocol.EXIT_AGENT_STOP)
    assert "survived" in n.reports.log_lines("patient", 1)
    # The server heard the node throughout: heartbeats listing the job went on while it stopped.
    during = [hb for hb in n.reports.all(protocol.REPORT_HEARTBEAT)[beats_before:] if hb["sent_at"] > exited["notice_at"]]
    assert any(hb["running"] == [["patient", 1]] for hb in during)

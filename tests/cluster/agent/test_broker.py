"""The agent's broker paths, through a real agent and real Redis: commands consumed from node.<name> (also those
sent while the agent was down), reports published to the report queue (also those made while the broker was down).
"""

from __future__ import annotations

import json

import pytest
from tests.cluster.agent.agent_testlib import wait_until

from cluster import protocol

pytestmark = pytest.mark.redis


def test_reports_go_to_the_default_queue_unless_told_otherwise(make_node):
    n = make_node(default_queue=True)
    n.start()
    reg = n.reports.wait(protocol.REPORT_REGISTER)
    assert reg["node"] == n.name
    n.launch("dq", 1, "echo default")
    assert n.reports.wait(protocol.REPORT_EXITED, job_id="dq")["exit_code"] == 0


def test_malformed_commands_are_dropped_and_the_agent_keeps_working(node):
    node.send(protocol.AGENT_LAUNCH, job_id="../escape", attempt=1, command="touch pwned")
    node.send(protocol.AGENT_LAUNCH, job_id="no-command", attempt=1)
    node.send(protocol.AGENT_PREEMPT, job_id="x", attempt="one")
    node.send("agent.unknown", job_id="x", attempt=1)
    node.app.send_task(protocol.AGENT_LAUNCH, args=["positional"], queue=protocol.node_queue(node.name))
    node.launch("fine", 1, "echo ok")
    node.reports.wait(protocol.REPORT_EXITED, job_id="fine", exit_code=0)
    assert node.agent.poll() is None
    assert {kw["job_id"] for kw in node.reports.all(protocol.REPORT_STARTED)} == {"fine"}
    output = node.agent_output()
    assert "job_id: '../escape'" in output
    assert "command: is required" in output
    assert "attempt: must be an integer" in output
    assert "unknown command 'agent.unknown'" in output


def test_commands_sent_while_the_agent_is_down_run_when_it_starts(make_node):
    n = make_node()
    n.launch("early", 1, "echo early-bird")
    n.start()
    n.reports.wait(protocol.REPORT_EXITED, job_id="early", exit_code=0)
    assert n.reports.log_lines("early", 1) == ["early-bird"]


def test_reports_made_while_the_broker_is_down_are_kept_and_delivered_when_it_returns(private_redis, make_node):
    from tests.cluster.agent.agent_testlib import ReportReader

    n = make_node(url=private_redis.url)
    n.start()
    n.reports.wait(protocol.REPORT_REGISTER)
    n.launch("outage", 1, "while [ ! -e go ]; do sleep 0.05; done; echo bye")
    n.reports.wait(protocol.REPORT_STARTED, job_id="outage")

    private_redis.stop()
    (n.job_dir("outage") / "work" / "go").touch()

    def queued_tasks() -> list[str]:
        state = json.loads((n.workdir / "agent-state.json").read_text())
        return [task for task, _ in state["outbox"]]

    # The exit happened with no broker: the report waits in the saved outbox.
    assert wait_until(lambda: protocol.REPORT_EXITED in queued_tasks(), what="EXITED queued")
    assert n.agent.poll() is None

    private_redis.start()  # a fresh, empty server on the same port
    try:
        n.reports.close()
    except Exception:
        pass
    n.reports = ReportReader(private_redis.url, n.name, n.report_queue)
    exited = n.reports.wait(protocol.REPORT_EXITED, job_id="outage")
    assert exited["exit_code"] == 0
    assert n.reports.log_lines("outage", 1) == ["bye"]
    # It says who it is again after reconnecting, before what happened meanwhile.
    tasks = [task for task, _ in n.reports.reports]
    assert tasks.index(protocol.REPORT_REGISTER) < tasks.index(protocol.REPORT_EXITED)
    wait_until(lambda: queued_tasks() == [], what="outbox drained")
    # Commands flow again (the agent re-declared its queue on the new server).
    n.launch("after", 1, "echo back")
    n.reports.wait(protocol.REPORT_EXITED, job_id="after", exit_code=0)


def test_telemetry_is_appended_to_the_stream_signed_with_the_nodes_token(make_node, agent_broker_url):
    import redis

    from cluster import message_signing, telemetry_stream

    conn = redis.Redis.from_url(agent_broker_url)
    conn.delete(telemetry_stream.STREAM_KEY)
    try:
        n = make_node("--telemetry-interval", "0.2")
        n.start()
        n.reports.wait(protocol.REPORT_REGISTER)

        def sent() -> list[dict]:
            entries = conn.xrange(telemetry_stream.STREAM_KEY)
            return [r for r in (json.loads(f[b"report"]) for _, f in entries) if r["node"] == n.name]

        wait_until(lambda: len(sent()) >= 2, what="two telemetry reports in the stream")
        first = sent()[0]
        assert [g["i"] for g in first["gpus"]] == [0, 1] and "token" not in first
        assert message_signing.verifies(n.token, protocol.REPORT_TELEMETRY, first)
        assert first["protocol_version"] == protocol.PROTOCOL_VERSION
    finally:
        conn.delete(telemetry_stream.STREAM_KEY)


def test_without_a_redis_broker_telemetry_is_sent_as_the_report_task():
    from cluster.agent.broker import BrokerLink

    link = BrokerLink("memory://", "n1", lambda *_: None)
    sent = []
    link.publish = lambda task, kwargs: sent.append((task, kwargs))
    link.publish_telemetry({"node": "n1"})
    assert sent == [(protocol.REPORT_TELEMETRY, {"node": "n1"})]


def test_reports_with_health_events_go_as_the_report_task_which_no_trimming_loses(monkeypatch):
    from cluster import telemetry_stream
    from cluster.agent.broker import BrokerLink

    link = BrokerLink("redis://127.0.0.1:6379/0", "n1", lambda *_: None)
    tasks, appended = [], []
    link.publish = lambda task, kwargs: tasks.append((task, kwargs))
    monkeypatch.setattr(telemetry_stream, "publish", lambda client, kwargs: appended.append(kwargs))
    quiet = {"node": "n1", "gpus": [{"i": 0, "xid": [], "ecc_dbe_new": 0}]}
    xid = {"node": "n1", "gpus": [{"i": 0, "xid": [], "ecc_dbe_new": 0}, {"i": 1, "xid": [79], "ecc_dbe_new": 0}]}
    ecc = {"node": "n1", "gpus": [{"i": 0, "xid": [], "ecc_dbe_new": 2}]}
    for report in (quiet, xid, ecc):
        link.publish_telemetry(report)
    link.close()
    assert appended == [quiet]
    assert tasks == [(protocol.REPORT_TELEMETRY, xid), (protocol.REPORT_TELEMETRY, ecc)]


@pytest.mark.parametrize("report", [{}, {"gpus": None}, {"gpus": "x"}, {"gpus": [1, None, {"xid": []}]}])
def test_a_report_without_health_events_carries_none(report):
    from cluster import telemetry_stream

    assert telemetry_stream.carries_events(report) is False


def test_a_report_that_cannot_be_signed_is_dropped_before_reaching_the_broker(caplog) -> None:  # noqa: ANN001
    from cluster.agent.broker import BrokerLink

    link = BrokerLink("redis://127.0.0.1:1/0", "n1", lambda headers, body: None, token="node-secret")
    assert link.publish(protocol.REPORT_LOG, {"node": "n1", "lines": [float("nan")]}) is False  # no BrokerDown: never sent
    assert "dropping unencodable cluster.log report" in caplog.text

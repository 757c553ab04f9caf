"""The agent's side of protocol versions: every report names the version it speaks; a command of a
version it does not accept is refused with a log line and not run; the server's refusal is logged."""

from __future__ import annotations

import time

from cluster import protocol, protocol_versions
from cluster.protocol import PROTOCOL_VERSION
from cluster.protocol_versions import PROTOCOL_FIELD


def test_reports_carry_the_version_and_a_command_too_new_is_refused_not_misread(node) -> None:
    register = node.reports.wait(protocol.REPORT_REGISTER)
    assert register[PROTOCOL_FIELD] == PROTOCOL_VERSION
    node.launch("new", 1, "echo ran")  # sanity: a launch without a version (an old server's) runs
    node.reports.wait(protocol.REPORT_EXITED, job_id="new", exit_code=0)
    cmd = protocol.LaunchCommand(job_id="newer", attempt=1, command="echo must-not-run")
    node.send(protocol.AGENT_LAUNCH, **cmd.to_kwargs(), **{PROTOCOL_FIELD: PROTOCOL_VERSION + 1})
    node.send(protocol_versions.AGENT_REFUSED, reason="the agent of node x speaks protocol version 9, too new")
    node.launch("marker", 1, "true")  # commands are handled in order: once this ran, the others were read
    node.reports.wait(protocol.REPORT_EXITED, job_id="marker")
    deadline = time.monotonic() + 30
    while "the server refused this agent's messages" not in node.agent_output() and time.monotonic() < deadline:
        time.sleep(0.1)
    output = node.agent_output()
    assert (f"refused a command: the server speaks protocol version {PROTOCOL_VERSION + 1}, too new for this side, "
            f"which speaks {PROTOCOL_VERSION}") in output
    assert "the server refused this agent's messages: the agent of node x speaks protocol version 9" in output
    assert node.reports.all(protocol.REPORT_STARTED, job_id="newer") == []
    assert not node.job_dir("newer").exists()
    assert all(hb[PROTOCOL_FIELD] == PROTOCOL_VERSION for hb in node.reports.all(protocol.REPORT_HEARTBEAT))


def test_a_command_the_server_did_not_sign_for_this_node_is_refused_and_not_run(node) -> None:
    """Anyone with the broker's password can write into a node's queue; the agent runs only what its
    server signed with this node's token."""
    from cluster import message_signing

    node.reports.wait(protocol.REPORT_REGISTER)
    cmd = protocol.LaunchCommand(job_id="forged", attempt=1, command="echo must-not-run").to_kwargs()
    node.send_unsigned(protocol.AGENT_LAUNCH, **cmd)
    node.send_unsigned(protocol.AGENT_LAUNCH, **message_signing.signed("another node's token", protocol.AGENT_LAUNCH,
                                                                       {**cmd, "attempt": 2}, time.time()))
    node.launch("marker", 1, "true")  # signed as the server signs: commands are handled in order
    node.reports.wait(protocol.REPORT_EXITED, job_id="marker")
    output = node.agent_output()
    assert "agent.launch carries no signature: not sent by this node's server" in output
    assert "agent.launch has a signature that does not verify with this node's token" in output
    assert node.reports.all(protocol.REPORT_STARTED, job_id="forged") == []
    assert not node.job_dir("forged").exists()

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

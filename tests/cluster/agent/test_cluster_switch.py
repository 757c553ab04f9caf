"""An agent whose server's database changes forgets the other database's jobs.

Job ids start again at 1 in a new database. Before, an agent that had run job 7 up to attempt 2
refused the new job 7's first launch as stale, and its heartbeats repeated the old job 7's exit,
which the server took for the new one's. Real agent processes, real job processes, commands as the
server sends them (with ``cluster_id``)."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest
from tests.cluster.agent.agent_testlib import wait_until

from cluster import protocol
from cluster.agent.cluster_switch import ClusterMemory
from cluster.protocol_versions import CLUSTER_ID_FIELD

pytestmark = pytest.mark.redis


def _launch(node: Any, job: str, attempt: int, command: str, cluster: str | None) -> None:
    kwargs = protocol.LaunchCommand(job_id=job, attempt=attempt, command=command).to_kwargs()
    if cluster is not None:
        kwargs[CLUSTER_ID_FIELD] = cluster
    node.send(protocol.AGENT_LAUNCH, **kwargs)


def test_a_new_database_s_job_starts_though_its_id_was_seen_and_the_old_one_is_forgotten(node) -> None:
    _launch(node, "7", 1, "echo old-1; echo old-state > state.txt; exit 3", "cluster-a")
    old_exit = node.reports.wait(protocol.REPORT_EXITED, job_id="7", attempt=1)
    assert old_exit[CLUSTER_ID_FIELD] == "cluster-a"
    _launch(node, "7", 2, "echo old; sleep 60", "cluster-a")
    node.reports.wait(protocol.REPORT_STARTED, job_id="7", attempt=2)

    _launch(node, "7", 1, "echo new; sleep 60", "cluster-b")
    started = node.reports.wait(protocol.REPORT_STARTED, job_id="7", attempt=1, **{CLUSTER_ID_FIELD: "cluster-b"})
    assert started["pid"] != old_exit.get("pid")
    node.reports.wait_log("7", 1, lambda line: line == "new", "the new database's job ran")
    hb = node.reports.wait_heartbeat(lambda hb: hb.get(CLUSTER_ID_FIELD) == "cluster-b", "the new cluster")
    assert hb["running"] == [["7", 1]]  # the old attempt 2 was stopped
    assert hb.get("exited", []) == []  # the old job 7's exit is not repeated to the new database
    # The old attempt's end is not reported: no server would know what it is about.
    assert node.reports.all(protocol.REPORT_EXITED, job_id="7", attempt=2) == []
    assert "now cluster cluster-b, not cluster-a" in node.agent_output()
    # The new job 7 sees none of the old one's files: its log holds its own line only, its working
    # directory is empty; the old job dirs were moved aside, not deleted.
    new_lines = [line for kw in node.reports.all(protocol.REPORT_LOG, job_id="7", attempt=1,
                                                 **{CLUSTER_ID_FIELD: "cluster-b"}) for line in kw["lines"]]
    assert new_lines == ["new"]
    assert not (node.job_dir("7") / "work" / "state.txt").exists()
    (moved,) = (node.workdir / "previous-clusters").glob("cluster-a-*")
    assert (moved / "jobs" / "7" / "work" / "state.txt").read_text() == "old-state\n"


def test_the_first_cluster_named_is_adopted_without_forgetting(node) -> None:
    """An agent of the previous version knew no id: its memory is taken to be of the first one it
    is told, so a stale launch is still refused."""
    _launch(node, "9", 2, "true", None)
    node.reports.wait(protocol.REPORT_EXITED, job_id="9", attempt=2)
    _launch(node, "9", 1, "echo stale", "cluster-a")
    _launch(node, "marker", 1, "true", "cluster-a")
    marker = node.reports.wait(protocol.REPORT_EXITED, job_id="marker")
    assert marker[CLUSTER_ID_FIELD] == "cluster-a"
    assert node.reports.all(protocol.REPORT_STARTED, job_id="9", attempt=1) == []
    assert node.reports.wait_heartbeat(lambda hb: True, "any")[CLUSTER_ID_FIELD] == "cluster-a"


def test_the_adopted_cluster_outlives_an_agent_restart(make_node) -> None:
    n = make_node()
    n.start()
    _launch(n, "5", 1, "true", "cluster-a")
    n.reports.wait(protocol.REPORT_EXITED, job_id="5")
    n.stop_agent(signal.SIGTERM)
    n.start()
    wait_until(lambda: len(n.reports.all(protocol.REPORT_REGISTER)) == 2, what="the restarted agent's register")
    assert n.reports.all(protocol.REPORT_REGISTER)[1][CLUSTER_ID_FIELD] == "cluster-a"


def test_muted_attempts_outlive_a_restart_with_the_adopted_id() -> None:
    memory = ClusterMemory("b")
    memory.muted.update({("3", 1), ("12", 2)})
    saved = json.loads(json.dumps(memory.to_state()))  # as the state file holds it
    restored = ClusterMemory.from_state(saved)
    assert restored.known == "b" and restored.muted == {("3", 1), ("12", 2)}
    assert restored.mutes(protocol.REPORT_EXITED, {"job_id": 12, "attempt": 2})
    assert ClusterMemory.from_state({"cluster_id": "a"}).muted == set()  # a state file from before
    assert ClusterMemory.from_state({"muted_attempts": [["3"], ["4", "x"], 5]}).muted == set()


def test_memory_adopts_switches_and_mutes() -> None:
    memory = ClusterMemory()
    assert memory.observe({}) is None and memory.known == ""
    assert memory.tag({"a": 1}) == {"a": 1}
    assert memory.observe({CLUSTER_ID_FIELD: "a"}) is None and memory.known == "a"
    assert memory.observe({CLUSTER_ID_FIELD: "a"}) is None
    assert memory.observe({CLUSTER_ID_FIELD: "b"}) == "a" and memory.known == "b"
    assert memory.tag({}) == {CLUSTER_ID_FIELD: "b"}
    memory.muted.add(("3", 1))
    assert memory.mutes(protocol.REPORT_LOG, {"job_id": 3, "attempt": 1})
    assert not memory.mutes(protocol.REPORT_LOG, {"job_id": 3, "attempt": 2})
    assert not memory.mutes(protocol.REPORT_REGISTER, {"job_id": 3, "attempt": 1})
    assert memory.mutes(protocol.REPORT_EXITED, {"job_id": 3, "attempt": 1})
    assert not memory.mutes(protocol.REPORT_LOG, {"job_id": 3, "attempt": 1})  # the exit was its last report

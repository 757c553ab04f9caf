"""Attempts that run but that a lost state no longer lists are found from their shims and stopped as stale."""

from __future__ import annotations

import signal

from tests.cluster.agent.agent_testlib import group_alive

from cluster import protocol


def test_attempts_missing_from_a_lost_state_are_found_and_stopped(h):
    from cluster.agent import procs

    h.launch(31, 2, "echo up; sleep 60", grace_period=5)
    h.launch("other", 1, "echo up; sleep 60")
    pgid = h.of(protocol.REPORT_STARTED, job_id=31)[0]["pid"]
    h.wait_line(31, lambda l: l == "up", attempt=2)
    h.wait_line("other", lambda l: l == "up")
    state = h.sup.to_state()
    state["attempts"] = [a for a in state["attempts"] if a["job_id"] == "other"]  # 31 forgotten
    h.reports.clear()

    h.sup = h.make()
    h.sup.restore(state)
    found = procs.find_shims(h.sup.workdir / "jobs")
    assert sorted(f.pid for f in found) == sorted([pgid, state["attempts"][0]["pgid"]])
    assert h.sup.stop_orphans(found) == [("31", 2)]
    ex = h.exited(31, 2)
    assert (ex["reason"], ex["signal"]) == (protocol.EXIT_STALE, signal.SIGTERM)
    assert h.lines(31, 2) == []  # lines from before the loss are not sent again
    assert not group_alive(pgid)
    assert h.sup.running() == [["other", 1]]

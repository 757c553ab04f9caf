"""Stopping an attempt through a supervisor (real processes, no broker): the notice, the SIGKILL at the end of
the grace period, the time limit."""

from __future__ import annotations

import signal

from tests.cluster.agent.agent_testlib import PY, group_alive

from cluster import protocol


def test_sigkill_after_the_grace_period_and_nothing_survives(h):
    h.launch("k", 1, "trap '' TERM; (trap '' TERM; sleep 60) & echo up; sleep 60", grace_period=0.3)
    pgid = h.of(protocol.REPORT_STARTED, job_id="k")[0]["pid"]
    h.wait_line("k", lambda l: l == "up")
    h.sup.kill({"job_id": "k", "attempt": 1, "grace_period": 0.3, "reason": "cancel"})
    ex = h.exited("k")
    assert (ex["signal"], ex["reason"], ex["checkpointed"]) == (signal.SIGKILL, "cancel", False)
    assert not group_alive(pgid)


def test_zero_grace_kills_at_once(h):
    h.launch("z", 1, "trap '' TERM; echo up; sleep 60")
    h.wait_line("z", lambda l: l == "up")
    h.sup.kill({"job_id": "z", "attempt": 1, "grace_period": 0})
    assert h.sup.attempts[("z", 1)].killed_at is not None
    assert h.exited("z")["signal"] == signal.SIGKILL


def test_time_limit_uses_the_grace_period_then_sigkill(h):
    h.launch("tl", 1, "trap 'echo got-term' TERM; while :; do sleep 0.05; done", time_limit=0.3, grace_period=0.3)
    ex = h.exited("tl")
    assert (ex["reason"], ex["signal"]) == (protocol.EXIT_TIMEOUT, signal.SIGKILL)
    assert "got-term" in h.lines("tl")


def test_stop_all_uses_each_attempts_grace_period(h):
    h.launch("s1", 1, "trap '' TERM; echo up; sleep 60", grace_period=0.2)
    h.launch("s2", 1, f"exec {PY} -c \"import signal,sys,time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); print('up', flush=True); time.sleep(60)\"", grace_period=30)
    h.wait_line("s1", lambda l: l == "up")
    h.wait_line("s2", lambda l: l == "up")
    h.sup.stop_all(protocol.EXIT_AGENT_STOP)
    assert h.exited("s1")["signal"] == signal.SIGKILL
    assert (h.exited("s2")["exit_code"], h.exited("s2")["reason"]) == (0, protocol.EXIT_AGENT_STOP)


def test_a_command_that_finished_in_time_is_not_a_timeout_while_its_leftovers_are_stopped(h):
    h.launch("late", 1, "(trap '' TERM; sleep 60) & exit 0", time_limit=0.2, grace_period=1.0)
    ex = h.exited("late")
    assert (ex["exit_code"], ex["reason"], ex["notice_at"]) == (0, None, None)

"""Starting and watching job process groups: the shim leads its own session and group."""

from __future__ import annotations

import os
import signal

from tests.cluster.agent.agent_testlib import group_alive, wait_until

from cluster.agent import procs


def test_spawned_group_is_its_own_session_with_default_sigpipe(tmp_path):
    handle = procs.spawn("grep -E '^(SigIgn|SigBlk)' /proc/self/status; cut -d' ' -f6 /proc/$$/stat", cwd=tmp_path, env=dict(os.environ),
                         log_path=tmp_path / "log", exit_path=tmp_path / "exit")
    wait_until(lambda: not handle.alive(), what="shim to end")
    out = (tmp_path / "log").read_text().split()
    sig_ign, sig_blk = int(out[1], 16), int(out[3], 16)
    assert not sig_ign & (1 << (signal.SIGPIPE - 1))
    assert not sig_blk & (1 << (signal.SIGTERM - 1))
    assert int(out[4]) == handle.pid
    assert not group_alive(handle.pid)


def test_a_spawned_attempt_starts_with_an_empty_log(tmp_path):
    """A launch that reaches spawn is of an attempt new to the node: lines already in the file are
    another job's (a job id reused by a new database) and must not be streamed as this one's."""
    (tmp_path / "log").write_text("another job's line\n")
    handle = procs.spawn("echo mine", cwd=tmp_path, env=dict(os.environ), log_path=tmp_path / "log",
                         exit_path=tmp_path / "exit")
    wait_until(lambda: not handle.alive(), what="shim to end")
    assert (tmp_path / "log").read_text() == "mine\n"

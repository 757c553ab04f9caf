"""The per-attempt shim, run as a plain process (no agent, no broker): how it records an attempt's end, its
confinement options, and fencing (a job whose agent is gone longer than the fence period kills itself)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.cluster.agent.agent_testlib import PY, kill_group, wait_until

from cluster import protocol
from cluster.agent import procs, shim
from cluster.agent.config import parse_args
from cluster.agent.shim import Options

SHIM = Path(shim.__file__)


def test_identity_options_become_popen_arguments_with_no_new_privs():
    options = Options(["--cgroup-procs", "/cg/a/cgroup.procs", "--uid", "1801", "--gid", "1801", "--groups", "1801,27"])
    identity = options.popen_identity()
    assert (identity["user"], identity["group"], identity["extra_groups"]) == (1801, 1801, [1801, 27])
    assert identity["preexec_fn"].__name__ == "_no_new_privs"
    assert options.cgroup_procs == ["/cg/a/cgroup.procs"]


def test_without_a_uid_the_job_keeps_the_shims_identity():
    assert Options([]).popen_identity() == {}


@pytest.mark.parametrize("args", [["--uid", "1801"], ["--uid", "0", "--gid", "0"], ["--bogus", "1"]])
def test_incomplete_root_or_unknown_options_are_refused(args):
    with pytest.raises(ValueError):
        Options(args)


def test_shim_records_exit_code_and_signal(tmp_path):
    _, record = run_shim(tmp_path, "exit 4")
    assert record["main"]["exit_code"] == 4 and record["done"] is True
    _, record = run_shim(tmp_path, "kill -INT $$")
    assert record["main"] == {**record["main"], "exit_code": None, "signal": signal.SIGINT}


def test_shim_waits_for_orphaned_descendants(tmp_path):
    # The command exits at once; its background child writes a file later.
    rc, record = run_shim(tmp_path, "(sleep 0.3; echo late > late.txt) & exit 0")
    assert rc == 0 and record["done"] is True
    assert (tmp_path / "late.txt").read_text() == "late\n"
    assert record["ended_at"] >= record["main"]["at"]


def test_shim_reports_a_command_it_cannot_start(tmp_path):
    exit_file = tmp_path / "x.exit"
    proc = subprocess.run([PY, "-I", "-S", str(procs.SHIM_PATH), str(exit_file), str(tmp_path / "missing-dir"), "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 127
    assert "missing-dir" in proc.stderr
    assert json.loads(exit_file.read_text())["main"]["exit_code"] == 127


def test_a_notice_during_shim_startup_reaches_the_job_not_the_shim(tmp_path):
    handle = procs.spawn("sleep 60", cwd=tmp_path, env=dict(os.environ), log_path=tmp_path / "log", exit_path=tmp_path / "exit")
    try:
        os.killpg(handle.pid, signal.SIGTERM)  # almost certainly before the shim has its handlers
        wait_until(lambda: not handle.alive(), what="shim to end")
        assert handle.wait_status() == 0
        assert json.loads((tmp_path / "exit").read_text())["main"]["signal"] == signal.SIGTERM
    finally:
        kill_group(handle.pid)


def run_shim(tmp_path: Path, command: str) -> tuple[int, dict]:
    exit_file = tmp_path / "attempt.exit"
    proc = subprocess.run([PY, "-I", "-S", str(procs.SHIM_PATH), str(exit_file), str(tmp_path), "--", "/bin/sh", "-c", command],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(exit_file.read_text())


def _run_shim(tmp_path: Path, command: str, lease: Path | None, after: float) -> tuple[subprocess.Popen, Path]:
    exit_file = tmp_path / "attempt-1.exit"
    env = {**os.environ}
    if lease is not None:
        env.update({shim.ENV_LEASE: str(lease), shim.ENV_FENCE_AFTER: str(after)})
    process = subprocess.Popen([sys.executable, "-I", "-S", str(SHIM), str(exit_file), str(tmp_path), "--",
                                "/bin/sh", "-c", command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    return process, exit_file


def test_a_stale_lease_kills_the_job_and_records_the_fence(tmp_path) -> None:
    lease = tmp_path / "agent.lease"
    lease.touch()
    process, exit_file = _run_shim(tmp_path, "sleep 60 & sleep 60; echo survived", lease, 0.5)
    out, _ = process.communicate(timeout=30)  # nobody renews the lease: the job is stopped
    record = json.loads(exit_file.read_text())
    assert record["fenced"] is True and record["done"] is True
    assert record["main"]["signal"] == 9
    assert b"stopping this job so that it cannot run twice" in out and b"survived" not in out


def test_a_renewed_lease_lets_the_job_run_and_no_lease_means_no_fence(tmp_path) -> None:
    lease = tmp_path / "agent.lease"
    lease.touch()
    process, exit_file = _run_shim(tmp_path, "sleep 2; echo done", lease, 0.5)
    while process.poll() is None:
        lease.touch()
        time.sleep(0.1)
    assert "fenced" not in json.loads(exit_file.read_text())
    assert process.stdout.read().strip().endswith(b"done")
    process, exit_file = _run_shim(tmp_path, "sleep 1.5; echo done", None, 0.5)
    process.wait(timeout=30)
    assert json.loads(exit_file.read_text())["main"]["exit_code"] == 0


def test_fence_period_defaults_and_a_fenced_attempt_is_reported_lost(tmp_path) -> None:
    from cluster.agent.outcome import outcome

    assert parse_args(["--name", "n", "--gpus", "1"], {}).fence_after == 10.0
    assert parse_args(["--name", "n", "--gpus", "1", "--heartbeat", "30"], {}).fence_after == 60.0
    assert parse_args(["--name", "n", "--gpus", "1", "--fence-after", "0"], {}).fence_after == 0.0

    class Att:
        reason = None
        notice_at = None
        killed_at = None
        handle = None

    record = {"main": {"exit_code": None, "signal": 9}, "last": None, "done": True, "fenced": True}
    assert outcome(Att(), record) == (None, 9, protocol.EXIT_LOST)


def test_a_stale_lease_gives_the_job_its_notice_and_grace_before_the_sigkill(tmp_path) -> None:
    """GRACE_PERIOD 1 s and a 2 s fence: SIGTERM once the lease is 1 s old, SIGKILL at 2 s. A job that
    saves on SIGTERM exits by itself, checkpointed; one that ignores it is SIGKILLed at the end."""
    lease = tmp_path / "agent.lease"
    lease.touch()
    os.environ["GRACE_PERIOD"] = "1"
    try:
        polite, polite_exit = _run_shim(tmp_path, "trap 'echo saved; exit 0' TERM; sleep 60 & wait", lease, 2)
        out, _ = polite.communicate(timeout=30)
        stubborn_dir = tmp_path / "stubborn"
        stubborn_dir.mkdir()
        stubborn, stubborn_exit = _run_shim(stubborn_dir, "trap 'echo ignored' TERM; while :; do sleep 0.1; done",
                                            lease, 2)
        lease.touch()
        stubborn_out, _ = stubborn.communicate(timeout=30)
    finally:
        del os.environ["GRACE_PERIOD"]
    record = json.loads(polite_exit.read_text())
    assert record["fenced"] is True and record["main"] == {**record["main"], "exit_code": 0, "signal": None}
    assert b"saved" in out and b"SIGTERM, then SIGKILL in" in out
    record = json.loads(stubborn_exit.read_text())
    assert record["fenced"] is True and record["main"]["signal"] == 9
    assert b"ignored" in stubborn_out

"""Fencing: a job whose agent is gone longer than the fence period kills itself, and is reported lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cluster import protocol
from cluster.agent import shim
from cluster.agent.config import parse_args

SHIM = Path(shim.__file__)


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


def test_an_agent_cut_off_from_the_broker_has_its_jobs_fenced_with_their_grace_and_reports_them_lost(
        private_redis, make_node) -> None:
    """The broker goes away under a running agent (fence 4 s). The agent holds its lease at the last
    heartbeat that got through, so the job's shim gives it SIGTERM 3 s after that heartbeat (its grace
    period is 1 s) and would SIGKILL it at 4 s: the job checkpoints and exits while the broker is still
    away. Once the broker is back the exit is reported as lost (so the server requeues the job),
    checkpointed, with the job's last log lines before it."""
    from tests.cluster.agent.agent_testlib import ReportReader

    n = make_node("--fence-after", "4", url=private_redis.url)
    n.start()
    n.reports.wait(protocol.REPORT_REGISTER)
    n.launch("cut", 1, "trap 'echo saved; touch $CHECKPOINT_DIR/.checkpoint-complete; exit 0' TERM; "
                       "echo running; sleep 300 & wait", grace_period=1)
    n.reports.wait(protocol.REPORT_STARTED, job_id="cut")
    private_redis.stop()
    exit_file = n.job_dir("cut") / "attempt-1.exit"
    deadline = time.monotonic() + 120
    while not (exit_file.exists() and json.loads(exit_file.read_text()).get("done")):
        assert time.monotonic() < deadline, n.agent_output()[-3000:]
        time.sleep(0.2)
    record = json.loads(exit_file.read_text())
    assert record["fenced"] is True and record["main"]["exit_code"] == 0
    assert n.agent.poll() is None
    private_redis.start()
    n.reports.close()
    n.reports = ReportReader(private_redis.url, n.name, n.report_queue)
    exited = n.reports.wait(protocol.REPORT_EXITED, job_id="cut")
    assert (exited["exit_code"], exited["signal"], exited["reason"]) == (0, None, protocol.EXIT_LOST)
    assert exited["checkpointed"] is True
    assert n.reports.log_lines("cut", 1)[-1] == "saved"
    assert "broker unreachable: unless a heartbeat gets through first" in n.agent_output()

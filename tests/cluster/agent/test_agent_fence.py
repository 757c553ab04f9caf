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

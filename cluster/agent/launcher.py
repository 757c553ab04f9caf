"""Starting an attempt on this node: its directories, its environment, its shim.

A ``Launcher`` turns a validated ``LaunchCommand`` into a running process group
and the ``Attempt`` record the supervisor keeps. The job's files::

    <workdir>/jobs/<job>/attempt-<n>.log    stdout + stderr of attempt n
    <workdir>/jobs/<job>/attempt-<n>.exit   how attempt n ended (written by the shim)
    <workdir>/jobs/<job>/work/              the job's working directory
    <checkpoint root>/<job>/                CHECKPOINT_DIR
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from cluster import protocol
from cluster.agent import procs
from cluster.agent.attempt import Attempt, attempt_exit_path, attempt_log_path, marker_identity
from cluster.agent.jobenv import job_environment
from cluster.agent.progress import progress_path


class Launcher:
    """Spawns attempts for one node; ``base_env`` is shared with whoever adds variables to it (the agent)."""

    def __init__(
        self,
        *,
        node: str,
        workdir: Path,
        checkpoint_root: Path,
        address: str = "",
        base_env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.address = address or node  # master address of a launch that names no nodes
        self.workdir = workdir
        self.checkpoint_root = checkpoint_root
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.clock = clock

    def job_dir(self, job: str) -> Path:
        """``<workdir>/jobs/<job>``: the attempts' logs and exit files, and the working directory."""
        return self.workdir / "jobs" / job

    def spawn(self, cmd: protocol.LaunchCommand) -> Attempt:
        """Start ``cmd`` under its shim; raises OSError if it cannot be started."""
        job = str(cmd.job_id)
        job_dir, checkpoint_dir = self.job_dir(job), self.checkpoint_root / job
        cwd = job_dir / "work"
        for d in (job_dir, cwd, checkpoint_dir):
            d.mkdir(parents=True, exist_ok=True)
        env = job_environment(self.base_env, cmd, node=self.node, checkpoint_dir=checkpoint_dir, address=self.address)
        env[protocol.ENV_PROGRESS_FILE] = str(progress_path(job_dir, cmd.attempt))
        marker_before = marker_identity(checkpoint_dir)
        started_at = self.clock()
        handle = procs.spawn(
            cmd.command,
            cwd=cwd,
            env=env,
            log_path=attempt_log_path(job_dir, cmd.attempt),
            exit_path=attempt_exit_path(job_dir, cmd.attempt),
        )
        stat = procs.proc_stat(handle.pid)
        return Attempt(
            job_id=cmd.job_id,
            attempt=cmd.attempt,
            pgid=handle.pid,
            start_ticks=stat[1] if stat else None,
            started_at=started_at,
            grace_period=cmd.grace_period,
            time_limit=cmd.time_limit,
            job_dir=str(job_dir),
            checkpoint_dir=str(checkpoint_dir),
            gpu_indices=list(cmd.gpu_indices),
            marker_before=marker_before,
            handle=handle,
        )

    def write_unstarted_log(self, cmd: protocol.LaunchCommand, message: str) -> None:
        """Append ``[agent] message`` to the log of an attempt that never started (best effort)."""
        job_dir = self.job_dir(str(cmd.job_id))
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
            with open(attempt_log_path(job_dir, cmd.attempt), "a") as f:
                f.write(f"[agent] {message}\n")
        except OSError:
            pass  # the work dir itself may be the problem; the report still says why

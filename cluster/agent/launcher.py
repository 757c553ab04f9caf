"""Starting an attempt on this node: its identity, directories, cgroup, image, environment and shim.

A ``Launcher`` turns a validated ``LaunchCommand`` into a running process group
and the ``TrackedAttempt`` record the supervisor keeps. The job's files::

    <workdir>/jobs/<job>/                   root, 0711: the job can reach work/, not list the rest
    <workdir>/jobs/<job>/attempt-<n>.log    stdout + stderr of attempt n (root, 0600; the job holds the fd)
    <workdir>/jobs/<job>/attempt-<n>.exit   how attempt n ended (written by the shim, root, 0600)
    <workdir>/jobs/<job>/work/              the job's working directory (the job's user, 0700)
    <checkpoint root>/<job>/                CHECKPOINT_DIR (the job's user, 0700)

The log and exit files stay root's on purpose: a job that owned their
directory could swap its log for a link to a file only root may read, which
the agent would then stream to the portal.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from cluster import protocol
from cluster.agent import checkpoint_owner, procs
from cluster.agent.attempt import TrackedAttempt, attempt_exit_path, attempt_log_path, marker_identity
from cluster.agent.cgroups import Limits
from cluster.agent.confinement import Confinement
from cluster.agent.identity import JobIdentity, agent_user, resolve
from cluster.agent.jobenv import DEFAULT_PATH, base_environment, job_environment
from cluster.agent.progress import progress_path
from cluster.agent.runtime import IMAGE_CHECKPOINT_DIR, IMAGE_WORK_DIR

log = logging.getLogger(__name__)

TRAVERSE_ONLY = 0o711  # a directory users pass through to their own, without listing it


class LaunchError(Exception):
    """The attempt cannot start; ``reason`` is the exit reason to report (launch-failed, image-unavailable)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


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
        confinement: Confinement | None = None,
        gpu_count: int = 0,
    ) -> None:
        self.node = node
        self.address = address or node  # master address of a launch that names no nodes
        self.workdir = workdir
        self.checkpoint_root = checkpoint_root
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.clock = clock
        self.confinement = confinement or Confinement()
        self.gpu_count = gpu_count

    def job_dir(self, job: str) -> Path:
        """``<workdir>/jobs/<job>``: the attempts' logs and exit files, and the working directory."""
        return self.workdir / "jobs" / job

    def identity(self, cmd: protocol.LaunchCommand) -> JobIdentity:
        """Who ``cmd`` runs as; raises LaunchError for a run_as this node refuses."""
        if self.confinement.single_user:
            return agent_user()
        try:
            return resolve(cmd.run_as, self.confinement.min_uid)
        except ValueError as exc:
            raise LaunchError(protocol.EXIT_LAUNCH_FAILED, str(exc)) from None

    def spawn(self, cmd: protocol.LaunchCommand, cluster_id: str | None = None,
              ordered_at: float | None = None) -> TrackedAttempt:
        """Start ``cmd`` confined under its shim; raises LaunchError or OSError if it cannot start.
        ``cluster_id``: the server's that sent it, whose job the checkpoint directory is claimed for;
        ``ordered_at``: when the server signed the launch (``messages.signed_time``)."""
        who = self.identity(cmd)
        rootfs = self._image(cmd)
        job = str(cmd.job_id)
        job_dir, checkpoint_dir = self.job_dir(job), self.checkpoint_root / job
        checkpoint_owner.claim(self.checkpoint_root, job, cluster_id)
        cwd = job_dir / "work"
        self._make_dirs(job_dir, cwd, checkpoint_dir, who)
        cgroup = self._cgroup(cmd)
        base = {**self.base_env, **base_environment(home=who.home, user=who.user, path=self.base_env.get("PATH", DEFAULT_PATH))}
        inside_ckpt = Path(IMAGE_CHECKPOINT_DIR) if rootfs else checkpoint_dir
        env = job_environment(base, cmd, node=self.node, checkpoint_dir=inside_ckpt, address=self.address)
        progress = progress_path(job_dir, cmd.attempt)
        progress.unlink(missing_ok=True)  # a new attempt here: anything in it is another job's
        env[protocol.ENV_PROGRESS_FILE] = str(Path(IMAGE_WORK_DIR) / progress.name if rootfs else progress)
        prefix: list[str] = []
        if rootfs is not None:
            prefix = self.confinement.runtime.command(rootfs=rootfs, work_dir=cwd, checkpoint_dir=checkpoint_dir,
                                                      gpu_indices=cmd.gpu_indices)
        marker_before = marker_identity(checkpoint_dir)
        started_at = self.clock()
        try:
            handle = procs.spawn(
                cmd.command, cwd=cwd, env=env,
                log_path=attempt_log_path(job_dir, cmd.attempt),
                exit_path=attempt_exit_path(job_dir, cmd.attempt),
                shim_args=[*(cgroup.join_args() if cgroup else []), *who.shim_args()],
                prefix=prefix,
            )
        except OSError:
            if cgroup is not None:
                cgroup.remove()
            raise
        stat = procs.proc_stat(handle.pid)
        return TrackedAttempt(
            job_id=cmd.job_id, attempt=cmd.attempt, pgid=handle.pid, start_ticks=stat[1] if stat else None,
            started_at=started_at, grace_period=cmd.grace_period, time_limit=cmd.time_limit,
            job_dir=str(job_dir), checkpoint_dir=str(checkpoint_dir), gpu_indices=list(cmd.gpu_indices),
            marker_before=marker_before, handle=handle, ordered_at=ordered_at,
        )

    def _image(self, cmd: protocol.LaunchCommand) -> Path | None:
        if not cmd.image:
            return None
        if self.confinement.images is None or self.confinement.runtime is None:
            raise LaunchError(protocol.EXIT_IMAGE_UNAVAILABLE,
                              f"image {cmd.image!r}: node {self.node} has no container runtime (bubblewrap) available")
        try:
            return self.confinement.images.ensure(cmd.image_uri, cmd.image_digest)
        except OSError as exc:
            raise LaunchError(protocol.EXIT_IMAGE_UNAVAILABLE, f"image {cmd.image!r}: {exc}") from None

    def _make_dirs(self, job_dir: Path, cwd: Path, checkpoint_dir: Path, who: JobIdentity) -> None:
        for d in (job_dir, cwd, checkpoint_dir):
            d.mkdir(parents=True, exist_ok=True)
        if not who.drop:
            return
        for d in (self.workdir, self.workdir / "jobs", job_dir, self.checkpoint_root):
            os.chmod(d, TRAVERSE_ONLY)
        for d in (cwd, checkpoint_dir):
            # Their parents are root's, so a job cannot have swapped them for links.
            os.chown(d, who.uid, who.gid)
            os.chmod(d, 0o700)

    def _cgroup(self, cmd: protocol.LaunchCommand):
        tree = self.confinement.cgroups
        if tree is None:
            return None
        limits = Limits(cpus=cmd.cpus, mem_bytes=cmd.mem_bytes, pids_max=self.confinement.pids_max,
                        gpu_indices=cmd.gpu_indices, gpu_count=self.gpu_count)
        try:
            return tree.create(str(cmd.job_id), cmd.attempt, limits)
        except OSError as exc:
            raise LaunchError(protocol.EXIT_LAUNCH_FAILED, f"cannot create the attempt's cgroup: {exc}") from None

    def write_unstarted_log(self, cmd: protocol.LaunchCommand, message: str) -> None:
        """Append ``[agent] message`` to the log of an attempt that never started (best effort)."""
        job_dir = self.job_dir(str(cmd.job_id))
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
            with open(attempt_log_path(job_dir, cmd.attempt), "a") as f:
                f.write(f"[agent] {message}\n")
        except OSError:
            pass  # the work dir itself may be the problem; the report still says why

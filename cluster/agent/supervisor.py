"""Job attempts on this node: launch, stop, time limits, exits and log streaming.

The supervisor knows nothing of the broker. The agent hands it decoded command
kwargs and calls ``tick()`` and ``stream_logs()`` from one loop (no threads, so
no locks); the supervisor answers with reports through ``emit(task, kwargs)``
(node and token are added by the agent). All deadlines are checked in
``tick()``: a grace period is a timestamp, never a blocking wait.

Idempotency by (job_id, attempt):

* a launch of the attempt already running does nothing; a launch of an attempt
  not newer than the newest one seen for the job is refused;
* a launch of a newer attempt while an older one still runs here kills the
  older one (the server has moved on, so it is stale);
* a preempt or kill of an attempt that is not running does nothing; repeating
  one does not signal twice and can only bring the SIGKILL deadline closer.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cluster import protocol
from cluster.agent import procs
from cluster.agent.jobenv import job_environment
from cluster.agent.logtail import read_new_lines

log = logging.getLogger(__name__)

Emit = Callable[[str, dict[str, Any]], None]
Key = tuple[str, int]

# Newest attempt number remembered per job (for refusing old launches); the
# oldest entries are forgotten beyond this many jobs.
MAX_REMEMBERED_JOBS = 10_000
_KILL_REASON_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


@dataclass
class Attempt:
    """One running attempt; everything but ``handle`` is saved in the state file."""

    job_id: str | int
    attempt: int
    pgid: int
    start_ticks: int | None
    started_at: float
    grace_period: float
    time_limit: float | None
    job_dir: str
    checkpoint_dir: str
    gpu_indices: list[int] = field(default_factory=list)
    marker_before: list[int] | None = None  # [inode, mtime_ns] of the marker at launch
    log_offset: int = 0
    notice_at: float | None = None
    kill_at: float | None = None
    killed_at: float | None = None
    reason: str | None = None
    handle: procs.ProcessHandle | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> Key:
        return (str(self.job_id), self.attempt)

    @property
    def log_path(self) -> Path:
        return attempt_log_path(Path(self.job_dir), self.attempt)

    @property
    def exit_path(self) -> Path:
        return Path(self.job_dir) / f"attempt-{self.attempt}.exit"

    def to_state(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "handle"}

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> "Attempt":
        names = {f.name for f in fields(cls)} - {"handle"}
        return cls(**{k: v for k, v in data.items() if k in names})


def attempt_log_path(job_dir: Path, attempt: int) -> Path:
    """Where attempt ``attempt``'s stdout and stderr go (kept across requeues)."""
    return job_dir / f"attempt-{attempt}.log"


def _marker_identity(checkpoint_dir: Path) -> list[int] | None:
    try:
        st = (checkpoint_dir / protocol.CHECKPOINT_MARKER).stat()
    except FileNotFoundError:
        return None
    return [st.st_ino, st.st_mtime_ns]


def _read_exit_file(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Supervisor:
    """The attempts running on this node and what happens to them."""

    def __init__(
        self,
        *,
        node: str,
        workdir: Path,
        checkpoint_root: Path,
        gpu_count: int,
        emit: Emit,
        address: str = "",
        base_env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        log_chunk_bytes: int = 64 * 1024,
        final_log_bytes: int = 1024 * 1024,
    ) -> None:
        self.node = node
        self.address = address or node  # master address of a launch that names no nodes
        self.workdir = workdir
        self.checkpoint_root = checkpoint_root
        self.gpu_count = gpu_count
        self.emit = emit
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.clock = clock
        self.log_chunk_bytes = log_chunk_bytes
        self.final_log_bytes = final_log_bytes
        self.attempts: dict[Key, Attempt] = {}
        self.newest: dict[str, int] = {}
        self.dirty = False

    # ----- state -------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {"attempts": [a.to_state() for a in self.attempts.values()], "newest": dict(self.newest)}

    def restore(self, state: Mapping[str, Any]) -> list[Key]:
        """Re-adopt the attempts a previous agent process left running.

        Each is watched through /proc by pid and start time; one that ended
        while no agent was watching is reported by the next ``tick()`` from its
        shim's exit file. Returns the adopted keys.
        """
        self.newest.update({str(k): int(v) for k, v in state.get("newest", {}).items()})
        for data in state.get("attempts", []):
            att = Attempt.from_state(data)
            att.handle = procs.AdoptedHandle(att.pgid, att.start_ticks)
            self.attempts[att.key] = att
        return list(self.attempts)

    def stop_orphans(self, found: list[procs.FoundShim]) -> list[Key]:
        """Stop live attempts of this work dir that the saved state does not list.

        That happens only when the state file was lost or unreadable. Such an
        attempt cannot be supervised as launched (its launch is unknown), and
        the server no longer counts on it (no heartbeat lists it), so it is
        stopped (SIGTERM, its GRACE_PERIOD, SIGKILL) and reported with reason
        "stale". Its identity comes from its environment; a job id of digits
        only is reported as an integer.
        """
        known = {a.pgid for a in self.attempts.values()}
        stopped = []
        for shim in found:
            if shim.pid in known:
                continue
            env = shim.env
            try:
                job = env[protocol.ENV_JOB_ID]
                job_id = int(job) if job.isdigit() else protocol.check_job_id(job)
                attempt = protocol.check_attempt(int(env[protocol.ENV_ATTEMPT]))
                grace = protocol.check_seconds(float(env.get(protocol.ENV_GRACE_PERIOD, "0")), "grace_period")
            except (KeyError, ValueError):
                log.error("process group %d runs a job of this node without its identity; SIGKILL", shim.pid)
                procs.signal_group(shim.pid, signal.SIGKILL)
                continue
            checkpoint_dir = Path(env.get(protocol.ENV_CHECKPOINT_DIR, self.checkpoint_root / str(job_id)))
            log_path = attempt_log_path(shim.exit_path.parent, attempt)
            att = Attempt(
                job_id=job_id, attempt=attempt, pgid=shim.pid, start_ticks=shim.start_ticks,
                started_at=self.clock(), grace_period=grace, time_limit=None,
                job_dir=str(shim.exit_path.parent), checkpoint_dir=str(checkpoint_dir),
                marker_before=_marker_identity(checkpoint_dir),
                log_offset=log_path.stat().st_size if log_path.exists() else 0,
                handle=procs.AdoptedHandle(shim.pid, shim.start_ticks),
            )
            log.warning("%s attempt %d (process group %d) is not in the saved state; stopping it", job_id, attempt, shim.pid)
            self.attempts[att.key] = att
            self._stop(att, protocol.EXIT_STALE, grace)
            stopped.append(att.key)
        return stopped

    def expecting_exit(self) -> bool:
        """True while some attempt has been told to stop (its exit is imminent)."""
        return any(a.kill_at is not None for a in self.attempts.values())

    def running(self) -> list[list[Any]]:
        """[[job_id, attempt], ...] of every attempt with a live process (heartbeat payload)."""
        return [[a.job_id, a.attempt] for a in self.attempts.values()]

    # ----- commands ----------------------------------------------------------

    def launch(self, kwargs: Mapping[str, Any]) -> str:
        """Handle AGENT_LAUNCH; returns "started", "duplicate", "refused" or "failed".

        Raises protocol.ProtocolError (naming the field) for malformed kwargs.
        """
        cmd = protocol.LaunchCommand.from_kwargs(kwargs)
        job = str(cmd.job_id)
        seen = self._seen(cmd)
        if seen is not None:
            return seen
        for older in [a for a in self.attempts.values() if str(a.job_id) == job]:
            log.warning("launch of %s attempt %d: killing older attempt %d still running here", job, cmd.attempt, older.attempt)
            self._stop(older, protocol.EXIT_STALE, 0.0)
        self._remember(job, cmd.attempt)
        bad = [i for i in cmd.gpu_indices if i >= self.gpu_count]
        if bad:
            self._launch_failed(cmd, f"gpu_indices {bad} do not exist: node {self.node} has {self.gpu_count} GPUs")
            return "failed"
        self._warn_shared_gpus(cmd)
        try:
            att = self._spawn(cmd)
        except OSError as exc:
            self._launch_failed(cmd, f"cannot start the job on node {self.node}: {exc}")
            return "failed"
        self.attempts[att.key] = att
        self.dirty = True
        log.info("started %s attempt %d as process group %d on GPUs %s", job, cmd.attempt, att.pgid, list(cmd.gpu_indices))
        self.emit(
            protocol.REPORT_STARTED,
            {"job_id": cmd.job_id, "attempt": cmd.attempt, "pid": att.pgid, "started_at": att.started_at},
        )
        return "started"

    def decline(self, kwargs: Mapping[str, Any], reason: str, why: str) -> str:
        """Answer AGENT_LAUNCH without starting anything; returns "declined", "duplicate" or "refused".

        A new attempt is reported ended with ``reason`` (a log line says
        ``why``) so the server settles it, and is remembered like a started
        one, so a repeat of the same launch is refused rather than started
        later. An attempt already running or already seen here is answered as
        ``launch()`` answers it. Raises protocol.ProtocolError for malformed kwargs.
        """
        cmd = protocol.LaunchCommand.from_kwargs(kwargs)
        seen = self._seen(cmd)
        if seen is not None:
            return seen
        self._remember(str(cmd.job_id), cmd.attempt)
        log.warning("launch of %s attempt %d declined: %s", cmd.job_id, cmd.attempt, why)
        self._report_unstarted(cmd, why, reason)
        return "declined"

    def preempt(self, kwargs: Mapping[str, Any]) -> bool:
        """Handle AGENT_PREEMPT; False if that attempt is not running here."""
        att = self._find(kwargs)
        grace = protocol.check_seconds(kwargs.get("grace_period", 0.0), "grace_period")
        if att is None:
            return False
        self._stop(att, protocol.EXIT_PREEMPT, grace)
        return True

    def kill(self, kwargs: Mapping[str, Any]) -> bool:
        """Handle AGENT_KILL (reason cancel, timeout, stale, ...); False if not running here."""
        att = self._find(kwargs)
        grace = protocol.check_seconds(kwargs.get("grace_period", 0.0), "grace_period")
        reason = kwargs.get("reason") or protocol.EXIT_CANCEL
        if not isinstance(reason, str) or not _KILL_REASON_RE.match(reason):
            raise protocol.ProtocolError("reason", f"must be a short lowercase word like 'cancel', got {reason!r}")
        if att is None:
            return False
        self._stop(att, reason, grace)
        return True

    def reconcile(self, kwargs: Mapping[str, Any]) -> list[Key]:
        """Handle AGENT_RECONCILE: stop every attempt not in ``keep``; return their keys.

        ``grace_period`` (optional, default 0: SIGTERM then SIGKILL at once)
        bounds how long a stale attempt may take to exit.
        """
        if "keep" not in kwargs:
            raise protocol.ProtocolError("keep", "is required")
        keep = {(str(job), attempt) for job, attempt in protocol.check_keep(kwargs["keep"])}
        grace = protocol.check_seconds(kwargs.get("grace_period", 0.0), "grace_period")
        stale = [a for key, a in self.attempts.items() if key not in keep]
        for att in stale:
            log.warning("reconcile: %s attempt %d is not expected here; stopping it", att.job_id, att.attempt)
            self._stop(att, protocol.EXIT_STALE, grace)
        return [a.key for a in stale]

    def stop_all(self, reason: str) -> None:
        """Stop every attempt with its own grace period (agent shutdown)."""
        for att in list(self.attempts.values()):
            self._stop(att, reason, att.grace_period)

    # ----- periodic work -----------------------------------------------------

    def tick(self) -> None:
        """Enforce time limits and SIGKILL deadlines; report attempts that ended."""
        now = self.clock()
        for att in list(self.attempts.values()):
            if att.handle is not None and att.handle.alive():
                self._enforce(att, now)
            else:
                self._finish(att, now)

    def stream_logs(self) -> None:
        """Report the complete new lines of every running attempt's log (one REPORT_LOG each)."""
        for att in self.attempts.values():
            lines, offset = read_new_lines(att.log_path, att.log_offset, self.log_chunk_bytes)
            if lines:
                att.log_offset = offset
                self.dirty = True
                self._emit_log(att, lines)

    # ----- internals ---------------------------------------------------------

    def _find(self, kwargs: Mapping[str, Any]) -> Attempt | None:
        for name in ("job_id", "attempt"):
            if name not in kwargs:
                raise protocol.ProtocolError(name, "is required")
        job = protocol.check_job_id(kwargs["job_id"])
        attempt = protocol.check_attempt(kwargs["attempt"])
        att = self.attempts.get((str(job), attempt))
        if att is None:
            log.info("%s attempt %d is not running here; nothing to do", job, attempt)
        return att

    def _seen(self, cmd: protocol.LaunchCommand) -> str | None:
        """"duplicate" if the attempt runs here, "refused" if it is not newer than one seen here, else None."""
        job = str(cmd.job_id)
        if (job, cmd.attempt) in self.attempts:
            log.info("launch of %s attempt %d: already running", job, cmd.attempt)
            return "duplicate"
        newest = self.newest.get(job)
        if newest is not None and cmd.attempt <= newest:
            log.warning("launch of %s attempt %d refused: attempt %d was already seen here", job, cmd.attempt, newest)
            return "refused"
        return None

    def _remember(self, job: str, attempt: int) -> None:
        self.newest.pop(job, None)
        self.newest[job] = attempt
        while len(self.newest) > MAX_REMEMBERED_JOBS:
            del self.newest[next(iter(self.newest))]
        self.dirty = True

    def _warn_shared_gpus(self, cmd: protocol.LaunchCommand) -> None:
        # The server is the authority on allocation (a stale attempt may be
        # about to be reconciled away), so overlap is logged, not refused.
        wanted = set(cmd.gpu_indices)
        for att in self.attempts.values():
            shared = wanted & set(att.gpu_indices)
            if shared:
                log.warning("%s attempt %d shares GPUs %s with %s attempt %d", cmd.job_id, cmd.attempt, sorted(shared), att.job_id, att.attempt)

    def _dirs(self, job: str) -> tuple[Path, Path, Path]:
        job_dir = self.workdir / "jobs" / job
        return job_dir, job_dir / "work", self.checkpoint_root / job

    def _spawn(self, cmd: protocol.LaunchCommand) -> Attempt:
        job_dir, cwd, checkpoint_dir = self._dirs(str(cmd.job_id))
        for d in (job_dir, cwd, checkpoint_dir):
            d.mkdir(parents=True, exist_ok=True)
        env = job_environment(self.base_env, cmd, node=self.node, checkpoint_dir=checkpoint_dir,
                              address=self.address)
        marker_before = _marker_identity(checkpoint_dir)
        started_at = self.clock()
        handle = procs.spawn(
            cmd.command,
            cwd=cwd,
            env=env,
            log_path=attempt_log_path(job_dir, cmd.attempt),
            exit_path=job_dir / f"attempt-{cmd.attempt}.exit",
        )
        stat = procs.proc_stat(handle.pid)
        att = Attempt(
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
        return att

    def _launch_failed(self, cmd: protocol.LaunchCommand, message: str) -> None:
        log.error("launch of %s attempt %d failed: %s", cmd.job_id, cmd.attempt, message)
        self._report_unstarted(cmd, message, protocol.EXIT_LAUNCH_FAILED)

    def _report_unstarted(self, cmd: protocol.LaunchCommand, message: str, reason: str) -> None:
        """Report an attempt that never started: the message in its log (file and REPORT_LOG), then its end."""
        job_dir, _, _ = self._dirs(str(cmd.job_id))
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
            with open(attempt_log_path(job_dir, cmd.attempt), "a") as f:
                f.write(f"[agent] {message}\n")
        except OSError:
            pass  # the work dir itself may be the problem; the report still says why
        ref = {"job_id": cmd.job_id, "attempt": cmd.attempt}
        self.emit(protocol.REPORT_LOG, {**ref, "lines": [f"[agent] {message}"]})
        self.emit(
            protocol.REPORT_EXITED,
            {**ref, "exit_code": None, "signal": None, "ended_at": self.clock(), "notice_at": None,
             "checkpointed": False, "reason": reason},
        )

    def _stop(self, att: Attempt, reason: str, grace: float) -> None:
        """Notice (SIGTERM to the group) now, SIGKILL at now + grace (or earlier if already due)."""
        now = self.clock()
        att.reason = reason
        if att.notice_at is None:
            att.notice_at = now
            procs.signal_group(att.pgid, signal.SIGTERM)
            log.info("SIGTERM to %s attempt %d (%s), SIGKILL in %gs", att.job_id, att.attempt, reason, grace)
        deadline = now + grace
        att.kill_at = deadline if att.kill_at is None else min(att.kill_at, deadline)
        self.dirty = True
        if att.kill_at <= now:
            self._sigkill(att, now)

    def _sigkill(self, att: Attempt, now: float) -> None:
        if att.killed_at is None:
            procs.signal_group(att.pgid, signal.SIGKILL)
            att.killed_at = now
            self.dirty = True
            log.info("SIGKILL to %s attempt %d", att.job_id, att.attempt)

    def _enforce(self, att: Attempt, now: float) -> None:
        if att.kill_at is None and att.time_limit is not None and now >= att.started_at + att.time_limit:
            log.info("%s attempt %d reached its time limit of %gs", att.job_id, att.attempt, att.time_limit)
            self._stop(att, protocol.EXIT_TIMEOUT, att.grace_period)
        elif att.kill_at is None and att.exit_path.exists():
            # The command has ended but processes it started live on: the same
            # contract as a notice (SIGTERM, grace, SIGKILL), without a notice.
            record = _read_exit_file(att.exit_path)
            if record is not None and not record.get("done"):
                log.info("%s attempt %d: command ended, stopping the processes it left", att.job_id, att.attempt)
                procs.signal_group(att.pgid, signal.SIGTERM)
                att.kill_at = now + att.grace_period
                self.dirty = True
        if att.kill_at is not None and now >= att.kill_at:
            self._sigkill(att, now)

    def _outcome(self, att: Attempt, record: dict[str, Any] | None) -> tuple[int | None, int | None, str | None]:
        """(exit_code, signal, reason) of an ended attempt; see docs/agent.md "Exit status"."""
        reason = att.reason
        if record and record.get("fenced"):
            # The job stopped itself because this agent was gone too long: the server has
            # (or will have) declared the node lost, so the attempt counts as lost, not failed.
            main = record.get("main") or {}
            return main.get("exit_code"), main.get("signal"), protocol.EXIT_LOST
        main = record.get("main") if record else None
        if main:
            last = record.get("last") or main
            if att.notice_at is not None and main.get("signal") is not None:
                # The wrapping shell died of the notice; the job's own exit is
                # that of its last process, unless we had to SIGKILL it.
                if record.get("done") and last.get("exit_code") is not None:
                    return last["exit_code"], None, reason
                if att.killed_at is not None:
                    return None, signal.SIGKILL, reason
            return main.get("exit_code"), main.get("signal"), reason
        status = att.handle.wait_status() if att.handle is not None else None
        if status is not None and status < 0:
            return None, -status, reason
        if att.killed_at is not None:
            return None, signal.SIGKILL, reason
        return None, None, reason or protocol.EXIT_LOST

    def _finish(self, att: Attempt, now: float) -> None:
        record = _read_exit_file(att.exit_path)
        exit_code, sig, reason = self._outcome(att, record)
        if not (record and record.get("done")):
            # The shim died before its descendants (killed, OOM): whatever is
            # left in the group must not outlive the attempt. After a clean
            # end the group is empty (the shim reaps every descendant).
            procs.signal_group(att.pgid, signal.SIGKILL)
        self._flush_final_log(att)
        marker_now = _marker_identity(Path(att.checkpoint_dir))
        wrote_marker = marker_now is not None and marker_now != att.marker_before
        exited_cleanly = att.notice_at is not None and att.killed_at is None and exit_code is not None
        ended_at = (record or {}).get("ended_at") or ((record or {}).get("main") or {}).get("at") or now
        del self.attempts[att.key]
        self.dirty = True
        log.info("%s attempt %d ended: exit_code=%s signal=%s reason=%s", att.job_id, att.attempt, exit_code, sig, reason)
        self.emit(
            protocol.REPORT_EXITED,
            {
                "job_id": att.job_id,
                "attempt": att.attempt,
                "exit_code": exit_code,
                "signal": sig,
                "ended_at": ended_at,
                "notice_at": att.notice_at,
                "checkpointed": bool(wrote_marker or exited_cleanly),
                "reason": reason,
            },
        )

    def _flush_final_log(self, att: Attempt) -> None:
        budget = self.final_log_bytes
        while budget > 0:
            lines, offset = read_new_lines(att.log_path, att.log_offset, min(self.log_chunk_bytes, budget), final=True)
            if not lines:
                break
            budget -= offset - att.log_offset
            att.log_offset = offset
            self._emit_log(att, lines)
        try:
            left = att.log_path.stat().st_size - att.log_offset
        except FileNotFoundError:
            left = 0
        if left > 0:
            self._emit_log(att, [f"[agent] {left} more bytes not streamed; the full log is {att.log_path} on node {self.node}"])

    def _emit_log(self, att: Attempt, lines: list[str]) -> None:
        self.emit(protocol.REPORT_LOG, {"job_id": att.job_id, "attempt": att.attempt, "lines": lines})

"""Job attempts on this node: launch, stop, time limits, exits and log streaming.

The supervisor knows nothing of the broker. The agent hands it decoded command
kwargs and calls ``tick()`` and ``stream_logs()`` from one loop (no threads, so
no locks); the supervisor answers with reports through ``emit(task, kwargs)``
(node and token are added by the agent). All deadlines are checked in
``tick()``: a grace period is a timestamp, never a blocking wait.

Idempotency by (job_id, attempt):

* a launch of the attempt already running starts nothing and reports its start
  again; a launch of an attempt not newer than the newest one seen for the job
  is refused, and so is a repeat of a launch of a job forgotten since
  (``launch_memory``: the floor under the time the server signed launches);
* a launch of a newer attempt while an older one still runs here kills the
  older one (the server has moved on, so it is stale);
* a preempt or kill of an attempt that is not running does nothing; repeating
  one does not signal twice and can only bring the SIGKILL deadline closer;
* a launch whose image is not yet unpacked here waits for it (``image_prep``:
  unpacked by a thread of its own, the one exception to "no threads") and is
  started by a later ``tick()``; a preempt or kill of it drops it, reported ended.
"""

from __future__ import annotations

import logging
import re
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cluster import protocol
from cluster.agent import attempt_cgroups, procs, stopping
from cluster.agent.attempt import TrackedAttempt, Key, marker_identity, read_exit_file
from cluster.agent.image_prep import PendingLaunches
from cluster.agent.launch_memory import LaunchMemory
from cluster.agent.launcher import Confinement, LaunchError, Launcher
from cluster.agent.logstream import LogLimits, flush_final_log, log_report, stream_new_lines
from cluster.agent.messages import ordered_before, signed_time
from cluster.agent.orphans import orphan_attempt
from cluster.agent.progress import ProgressReader
from cluster.agent.sessions import Sessions
from cluster.agent.outcome import checkpointed, ended_at, outcome, wrote_marker
from cluster.protocol_versions import CLUSTER_ID_FIELD

log = logging.getLogger(__name__)

Emit = Callable[[str, dict[str, Any]], None]

_KILL_REASON_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


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
        log_limits: LogLimits = LogLimits(),
        confinement: Confinement | None = None,
    ) -> None:
        self.node = node
        self.workdir = workdir
        self.checkpoint_root = checkpoint_root
        self.gpu_count = gpu_count
        self.emit = emit
        self.clock = clock
        self.progress = ProgressReader(emit, clock)
        self.launcher = Launcher(node=node, workdir=workdir, checkpoint_root=checkpoint_root, address=address,
                                 base_env=base_env, clock=clock, confinement=confinement, gpu_count=gpu_count)
        self.cgroups = self.launcher.confinement.cgroups
        self.sessions = Sessions(self.launcher.address, node=node)  # interactive sessions' ports and secrets
        # The variables every job starts from (the agent adds its lease here); shared with the launcher.
        self.base_env = self.launcher.base_env
        self.log_limits = log_limits
        self.attempts: dict[Key, TrackedAttempt] = {}
        self.launches = LaunchMemory()  # the newest attempt of each job seen here, and the floor under repeats
        confined = self.launcher.confinement
        self.pending = PendingLaunches(confined.images if confined.runtime is not None else None)
        self.dirty = False

    # ----- state -------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {"attempts": [a.to_state() for a in self.attempts.values()], **self.launches.to_state(),
                "sessions": self.sessions.to_state(), "awaiting_image": self.pending.to_state()}

    def restore(self, state: Mapping[str, Any]) -> list[Key]:
        """Re-adopt the attempts a previous agent process left running.

        Each is watched through /proc by pid and start time; one that ended
        while no agent was watching is reported by the next ``tick()`` from its
        shim's exit file. Returns the adopted keys.
        """
        self.launches.restore(state)
        for kwargs in state.get("awaiting_image", []):  # unpacked again (a half-done unpack is never used)
            self._start_or_wait(protocol.LaunchCommand.from_kwargs(kwargs), kwargs)
        self.sessions.restore(state.get("sessions", []))
        for data in state.get("attempts", []):
            att = TrackedAttempt.from_state(data)
            att.handle = procs.AdoptedHandle(att.pgid, att.start_ticks)
            self.attempts[att.key] = att
        return list(self.attempts)

    def stop_orphans(self, found: list[procs.FoundShim]) -> list[Key]:
        """Stop live attempts of this work dir that the saved state does not list (see orphans.py).

        Each is stopped (SIGTERM, its GRACE_PERIOD, SIGKILL) and reported with
        reason "stale". Returns their keys.
        """
        known = {a.pgid for a in self.attempts.values()}
        stopped = []
        for shim in found:
            if shim.pid in known:
                continue
            att = orphan_attempt(shim, self.checkpoint_root, self.clock())
            if att is None:
                continue
            log.warning("%s attempt %d (process group %d) is not in the saved state; stopping it", att.job_id, att.attempt, shim.pid)
            self.attempts[att.key] = att
            self._stop(att, protocol.EXIT_STALE, att.grace_period)
            stopped.append(att.key)
        return stopped

    def expecting_exit(self) -> bool:
        """True while some attempt has been told to stop (its exit is imminent)."""
        return any(a.kill_at is not None for a in self.attempts.values())

    def running(self) -> list[list[Any]]:
        """[[job_id, attempt], ...] of every attempt with a live process or waiting for its image (heartbeat
        payload: the server must not take a launch that waits for its image for a lost one)."""
        return [[a.job_id, a.attempt] for a in self.attempts.values()] + [list(k) for k in self.pending.keys()]

    # ----- commands ----------------------------------------------------------

    def launch(self, kwargs: Mapping[str, Any]) -> str:
        """Handle AGENT_LAUNCH; returns "started", "waiting" (for its image), "duplicate", "refused" or "failed".

        Raises protocol.ProtocolError (naming the field) for malformed kwargs.
        """
        cmd = protocol.LaunchCommand.from_kwargs(kwargs)
        job = str(cmd.job_id)
        seen = self._seen(cmd, kwargs)
        if seen is not None:
            return seen
        for older in [a for a in self.attempts.values() if str(a.job_id) == job]:
            log.warning("launch of %s attempt %d: killing older attempt %d still running here", job, cmd.attempt, older.attempt)
            self._stop(older, protocol.EXIT_STALE, 0.0)
        self._remember(job, cmd.attempt, kwargs)
        bad = [i for i in cmd.gpu_indices if i >= self.gpu_count]
        if bad:
            self._launch_failed(cmd, f"gpu_indices {bad} do not exist: node {self.node} has {self.gpu_count} GPUs")
            return "failed"
        self._warn_shared_gpus(cmd)
        return self._start_or_wait(cmd, kwargs)

    def _start_or_wait(self, cmd: protocol.LaunchCommand, kwargs: Mapping[str, Any]) -> str:
        """Start ``cmd`` now, or "waiting" when its image must be unpacked first (``image_prep``)."""
        if self.pending.must_wait(cmd):  # its log says why it is not running yet (a large image: minutes)
            self.pending.add(cmd, kwargs)
            self.dirty = True
            self.emit(protocol.REPORT_LOG, {"job_id": cmd.job_id, "attempt": cmd.attempt,
                                            "lines": [f"[agent] unpacking image {cmd.image!r} on {self.node} first"]})
            return "waiting"
        job = str(cmd.job_id)
        try:
            att = self.launcher.spawn(self.sessions.prepare(cmd), kwargs.get(CLUSTER_ID_FIELD), signed_time(kwargs))
        except LaunchError as exc:
            self._launch_failed(cmd, str(exc), exc.reason)
            return "failed"
        except OSError as exc:
            self._launch_failed(cmd, f"cannot start the job on node {self.node}: {exc}")
            return "failed"
        self.attempts[att.key] = att
        self.dirty = True
        log.info("started %s attempt %d as process group %d on GPUs %s", job, cmd.attempt, att.pgid, list(cmd.gpu_indices))
        self.emit(protocol.REPORT_STARTED,
                  {"job_id": cmd.job_id, "attempt": cmd.attempt, "pid": att.pgid, "started_at": att.started_at})
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
        seen = self._seen(cmd, kwargs)
        if seen is not None:
            return seen
        self._remember(str(cmd.job_id), cmd.attempt, kwargs)
        log.warning("launch of %s attempt %d declined: %s", cmd.job_id, cmd.attempt, why)
        self._report_unstarted(cmd, why, reason)
        return "declined"

    def preempt(self, kwargs: Mapping[str, Any]) -> bool:
        """Handle AGENT_PREEMPT; False if that attempt is not running here."""
        att = self._find(kwargs)
        grace = protocol.check_seconds(kwargs.get("grace_period", 0.0), "grace_period")
        if att is None:
            return self._drop_waiting(kwargs, protocol.EXIT_PREEMPT)
        self._stop(att, protocol.EXIT_PREEMPT, grace)
        return True

    def kill(self, kwargs: Mapping[str, Any]) -> bool:
        """Handle AGENT_KILL (reason cancel, timeout, stale, ...); False if not running here."""
        att = self._find(kwargs)
        grace = protocol.check_seconds(kwargs.get("grace_period", 0.0), "grace_period")
        reason = kwargs.get("reason") or protocol.EXIT_CANCEL
        if not isinstance(reason, str) or not _KILL_REASON_RE.fullmatch(reason):
            raise protocol.ProtocolError("reason", f"must be a short lowercase word like 'cancel', got {reason!r}")
        if att is None:
            return self._drop_waiting(kwargs, reason)
        self._stop(att, reason, grace)
        return True

    def reconcile(self, kwargs: Mapping[str, Any]) -> list[Key]:
        """Handle AGENT_RECONCILE: stop every attempt not in ``keep`` that was launched before it (``ordered_before``);
        return their keys. ``grace_period`` (optional, default 0: SIGTERM then SIGKILL at once) bounds how long a
        stale attempt may take to exit."""
        if "keep" not in kwargs:
            raise protocol.ProtocolError("keep", "is required")
        keep = {(str(job), attempt) for job, attempt in protocol.check_keep(kwargs["keep"])}
        grace = protocol.check_seconds(kwargs.get("grace_period", 0.0), "grace_period")
        stale = [a for key, a in self.attempts.items() if key not in keep and ordered_before(a.ordered_at, kwargs)]
        for att in stale:
            log.warning("reconcile: %s attempt %d is not expected here; stopping it", att.job_id, att.attempt)
            self._stop(att, protocol.EXIT_STALE, grace)
        waiting = [key for key, (_, kw) in self.pending.waiting.items() if key not in keep
                   and ordered_before(signed_time(kw), kwargs)]
        for job, attempt in waiting:
            self._drop_waiting({"job_id": job, "attempt": attempt}, protocol.EXIT_STALE)
        return [a.key for a in stale] + waiting

    def stop_all(self, reason: str) -> None:
        """Stop every attempt with its own grace period, and drop the launches waiting for an image (agent shutdown)."""
        for att in list(self.attempts.values()):
            self._stop(att, reason, att.grace_period)
        for job, attempt in self.pending.keys():
            self._drop_waiting({"job_id": job, "attempt": attempt}, reason)

    # ----- periodic work -----------------------------------------------------

    def tick(self) -> None:
        """Start the launches whose image is now unpacked; enforce time limits and SIGKILL deadlines; report
        attempts that ended."""
        for cmd, kwargs, error in self.pending.ready():
            self.dirty = True
            if error is not None:
                self._launch_failed(cmd, f"image {cmd.image!r}: {error}", protocol.EXIT_IMAGE_UNAVAILABLE)
            else:
                self._start_or_wait(cmd, kwargs)
        now = self.clock()
        for att in list(self.attempts.values()):
            if att.handle is not None and att.handle.alive():
                self.dirty = stopping.enforce(att, now) or self.dirty
                attempt_cgroups.kill_if_killed(self.cgroups, att)
            else:
                self._finish(att, now)
        self.dirty = self.sessions.poll(set(self.attempts), now, self.emit) or self.dirty

    def stream_logs(self) -> None:
        """Report the complete new lines of every running attempt's log (one REPORT_LOG each) and its
        newest progress report when one is due (REPORT_PROGRESS, cluster/agent/progress.py)."""
        for att in self.attempts.values():
            if stream_new_lines(att, self.log_limits, self.node, self._emit_log):
                self.dirty = True
            if self.progress.poll(att):
                self.dirty = True

    # ----- internals ---------------------------------------------------------

    def _find(self, kwargs: Mapping[str, Any]) -> TrackedAttempt | None:
        for name in ("job_id", "attempt"):
            if name not in kwargs:
                raise protocol.ProtocolError(name, "is required")
        job = protocol.check_job_id(kwargs["job_id"])
        attempt = protocol.check_attempt(kwargs["attempt"])
        att = self.attempts.get((str(job), attempt))
        if att is None:
            log.info("%s attempt %d is not running here; nothing to do", job, attempt)
        return att

    def _drop_waiting(self, kwargs: Mapping[str, Any], reason: str) -> bool:
        """Take out ``kwargs``'s attempt waiting for its image, reported ended (``reason``); False if none waits."""
        cmd = self.pending.pop((str(kwargs["job_id"]), int(kwargs["attempt"])))
        if cmd is None:
            return False
        self.dirty = True  # the attempt's log says why (_report_unstarted)
        self._report_unstarted(cmd, f"stopped ({reason}) while its image {cmd.image!r} was unpacked: it never ran", reason)
        return True

    def _seen(self, cmd: protocol.LaunchCommand, kwargs: Mapping[str, Any]) -> str | None:
        """"duplicate" if the attempt runs here, "refused" if it is not newer than one seen here or is a repeat
        (``LaunchMemory``), else None.

        A duplicate is answered with the attempt's REPORT_STARTED again: the server re-sends a launch
        whose start it has not heard of (cluster/overdue.py), so that report was lost or is late, and
        without it the job would show as starting for its whole run. The server ignores a repeat."""
        job = str(cmd.job_id)
        if (job, cmd.attempt) in self.pending.waiting:
            log.info("launch of %s attempt %d: still waiting for its image", job, cmd.attempt)
            return "waiting"
        att = self.attempts.get((job, cmd.attempt))
        if att is not None:
            log.info("launch of %s attempt %d: already running; its start is reported again", job, cmd.attempt)
            self.emit(protocol.REPORT_STARTED,
                      {"job_id": cmd.job_id, "attempt": cmd.attempt, "pid": att.pgid, "started_at": att.started_at})
            return "duplicate"
        refused = self.launches.refusal(job, cmd.attempt, signed_time(kwargs))
        if refused:
            log.warning("launch of %s attempt %d refused: %s", job, cmd.attempt, refused)
            return "refused"
        return None

    def _remember(self, job: str, attempt: int, kwargs: Mapping[str, Any]) -> None:
        self.launches.remember(job, attempt, signed_time(kwargs))
        self.dirty = True

    def _warn_shared_gpus(self, cmd: protocol.LaunchCommand) -> None:
        # The server is the authority on allocation (a stale attempt may be
        # about to be reconciled away), so overlap is logged, not refused.
        wanted = set(cmd.gpu_indices)
        for att in self.attempts.values():
            shared = wanted & set(att.gpu_indices)
            if shared:
                log.warning("%s attempt %d shares GPUs %s with %s attempt %d", cmd.job_id, cmd.attempt, sorted(shared), att.job_id, att.attempt)

    def _launch_failed(self, cmd: protocol.LaunchCommand, message: str, reason: str = protocol.EXIT_LAUNCH_FAILED) -> None:
        log.error("launch of %s attempt %d failed: %s", cmd.job_id, cmd.attempt, message)
        self._report_unstarted(cmd, message, reason)

    def _report_unstarted(self, cmd: protocol.LaunchCommand, message: str, reason: str) -> None:
        """Report an attempt that never started: the message in its log (file and REPORT_LOG), then its end."""
        self.launcher.write_unstarted_log(cmd, message)
        ref = {"job_id": cmd.job_id, "attempt": cmd.attempt}
        self.emit(protocol.REPORT_LOG, {**ref, "lines": [f"[agent] {message}"]})
        self.emit(
            protocol.REPORT_EXITED,
            {**ref, "exit_code": None, "signal": None, "ended_at": self.clock(), "notice_at": None,
             "checkpointed": False, "reason": reason, "message": message, "peak_mem_bytes": None, "cpu_seconds": None},
        )

    def _stop(self, att: TrackedAttempt, reason: str, grace: float) -> None:
        stopping.notice(att, reason, grace, self.clock())
        self.dirty = True
        attempt_cgroups.kill_if_killed(self.cgroups, att)

    def kill_unknown_cgroups(self) -> list[Key]:
        """At start, after adoption: kill whatever runs in cgroups of this node no attempt owns (attempt_cgroups.py)."""
        return attempt_cgroups.kill_unknown(self.cgroups, self.attempts)

    def _finish(self, att: TrackedAttempt, now: float) -> None:
        record = read_exit_file(att.exit_path)
        exit_code, sig, reason = outcome(att, record)
        if not (record and record.get("done")):
            # The shim died before its descendants (killed, OOM): whatever is
            # left in the group must not outlive the attempt. After a clean
            # end the group is empty (the shim reaps every descendant).
            procs.signal_group(att.pgid, signal.SIGKILL)
        peak_mem, cpu_seconds, oom = attempt_cgroups.release(self.cgroups, att)
        message = ""
        if oom and att.reason is None and exit_code != 0:
            reason = protocol.EXIT_OUT_OF_MEMORY
            message = "the job went past its memory limit and the kernel's OOM killer ended it"
        flush_final_log(att, self.log_limits, self.node, self._emit_log)
        self.progress.poll(att, final=True)
        self.progress.forget(att.key)
        if message:
            self._emit_log(att, [f"[agent] {message}"])
        del self.attempts[att.key]
        self.dirty = True
        log.info("%s attempt %d ended: exit_code=%s signal=%s reason=%s", att.job_id, att.attempt, exit_code, sig, reason)
        marker = marker_identity(Path(att.checkpoint_dir))
        self.emit(protocol.REPORT_EXITED, {
            "job_id": att.job_id, "attempt": att.attempt, "exit_code": exit_code, "signal": sig,
            "ended_at": ended_at(record, now), "notice_at": att.notice_at,
            "checkpointed": checkpointed(att, exit_code, marker), "checkpoint_marker": wrote_marker(att, marker),
            "reason": reason, "message": message, "peak_mem_bytes": peak_mem, "cpu_seconds": cpu_seconds,
        })

    def _emit_log(self, att: TrackedAttempt, lines: list[str]) -> None:
        self.emit(*log_report(att, lines))

"""Stopping an attempt: the notice (SIGTERM), the SIGKILL deadline, the time limit.

Deadlines are timestamps on the ``TrackedAttempt`` checked on every loop step, never
blocking waits. Each function returns True when it changed the attempt (so the
state file must be saved).
"""

from __future__ import annotations

import logging
import signal

from cluster import protocol
from cluster.agent import procs
from cluster.agent.attempt import TrackedAttempt, read_exit_file

log = logging.getLogger(__name__)


def notice(att: TrackedAttempt, reason: str, grace: float, now: float) -> None:
    """SIGTERM to the group now (once), SIGKILL at now + grace (or earlier if already due).

    A repeated notice does not signal again: it replaces the reason and can
    only bring the SIGKILL deadline closer.
    """
    att.reason = reason
    if att.notice_at is None:
        att.notice_at = now
        procs.signal_group(att.pgid, signal.SIGTERM)
        log.info("SIGTERM to %s attempt %d (%s), SIGKILL in %gs", att.job_id, att.attempt, reason, grace)
    deadline = now + grace
    att.kill_at = deadline if att.kill_at is None else min(att.kill_at, deadline)
    if att.kill_at <= now:
        sigkill(att, now)


def sigkill(att: TrackedAttempt, now: float) -> bool:
    """SIGKILL the group once; False if it had already been killed."""
    if att.killed_at is not None:
        return False
    procs.signal_group(att.pgid, signal.SIGKILL)
    att.killed_at = now
    log.info("SIGKILL to %s attempt %d", att.job_id, att.attempt)
    return True


def enforce(att: TrackedAttempt, now: float) -> bool:
    """Fire the time limit, stop processes a finished command left behind, and the SIGKILL deadline."""
    changed = False
    if att.kill_at is None and att.time_limit is not None and now >= att.started_at + att.time_limit:
        log.info("%s attempt %d reached its time limit of %gs", att.job_id, att.attempt, att.time_limit)
        notice(att, protocol.EXIT_TIMEOUT, att.grace_period, now)
        changed = True
    elif att.kill_at is None and att.exit_path.exists():
        # The command has ended but processes it started live on: the same
        # contract as a notice (SIGTERM, grace, SIGKILL), without a notice.
        record = read_exit_file(att.exit_path)
        if record is not None and not record.get("done"):
            log.info("%s attempt %d: command ended, stopping the processes it left", att.job_id, att.attempt)
            procs.signal_group(att.pgid, signal.SIGTERM)
            att.kill_at = now + att.grace_period
            changed = True
    if att.kill_at is not None and now >= att.kill_at:
        changed = sigkill(att, now) or changed
    return changed

"""Attempts of this work dir that run but that the saved state does not list.

That happens only when the state file was lost or unreadable. Such an attempt
cannot be supervised as launched (its launch is unknown) and the server no
longer counts on it (no heartbeat lists it), yet it holds GPUs; the supervisor
stops it and reports it ``stale``. Its identity comes from its environment.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path

from cluster import protocol
from cluster.agent import procs
from cluster.agent.attempt import TrackedAttempt, attempt_log_path, marker_identity

log = logging.getLogger(__name__)


def orphan_attempt(shim: procs.FoundShim, checkpoint_root: Path, now: float) -> TrackedAttempt | None:
    """The attempt ``shim`` runs, rebuilt from its environment; None if it has no identity.

    A job id of digits only is taken as an integer (the server's ids). A shim
    without a readable identity cannot be reported, so it is SIGKILLed here.
    """
    env = shim.env
    try:
        job = env[protocol.ENV_JOB_ID]
        job_id = int(job) if job.isdigit() else protocol.check_job_id(job)
        attempt = protocol.check_attempt(int(env[protocol.ENV_ATTEMPT]))
        grace = protocol.check_seconds(float(env.get(protocol.ENV_GRACE_PERIOD, "0")), "grace_period")
    except (KeyError, ValueError):
        log.error("process group %d runs a job of this node without its identity; SIGKILL", shim.pid)
        procs.signal_group(shim.pid, signal.SIGKILL)
        return None
    checkpoint_dir = Path(env.get(protocol.ENV_CHECKPOINT_DIR, checkpoint_root / str(job_id)))
    log_path = attempt_log_path(shim.exit_path.parent, attempt)
    return TrackedAttempt(
        job_id=job_id, attempt=attempt, pgid=shim.pid, start_ticks=shim.start_ticks,
        started_at=now, grace_period=grace, time_limit=None,
        job_dir=str(shim.exit_path.parent), checkpoint_dir=str(checkpoint_dir),
        marker_before=marker_identity(checkpoint_dir),
        log_offset=log_path.stat().st_size if log_path.exists() else 0,
        handle=procs.AdoptedHandle(shim.pid, shim.start_ticks),
    )

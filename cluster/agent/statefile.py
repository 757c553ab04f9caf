"""The agent's persistent state (JSON in the work dir) and its single-owner lock."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STATE_VERSION = 1


class WorkdirBusy(RuntimeError):
    """The work directory belongs to another agent (live, or of another node name)."""


def lock_workdir(workdir: Path) -> int:
    """Take an exclusive lock on ``workdir``; return the fd (keep it open).

    The fd is not inherited by jobs (Python fds are non-inheritable and jobs
    are spawned with close_fds), so the lock dies with the agent process even
    when its jobs survive it.
    """
    fd = os.open(workdir / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise WorkdirBusy(f"another agent is running with work dir {workdir}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def load(path: Path) -> dict[str, Any]:
    """The saved state, or {} when there is none.

    An unreadable file is kept aside (``.corrupt-<time>``) rather than deleted,
    and the agent starts empty: losing track of jobs is logged loudly, but a
    node must not refuse to start.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
        path.replace(aside)
        log.error("state file %s unreadable (%s); moved to %s, starting with no known jobs", path, exc, aside)
        return {}
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        log.error("state file %s has unknown version %r; ignoring it", path, data.get("version") if isinstance(data, dict) else None)
        return {}
    return data


def save(path: Path, data: dict[str, Any]) -> None:
    """Replace the state file atomically (write a temp file, rename over).

    No fsync: the rename already protects against the agent crashing mid-write,
    which is the case that matters; after a machine crash the jobs are gone too.
    """
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**data, "version": STATE_VERSION}))
    os.replace(tmp, path)

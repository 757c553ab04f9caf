"""One job attempt as the supervisor tracks it, and the files it leaves in its job directory.

An attempt lives in ``<workdir>/jobs/<job>/``: ``attempt-<n>.log`` (its stdout
and stderr) and ``attempt-<n>.exit`` (how it ended, written by the shim). The
``TrackedAttempt`` record is what the state file keeps, so a restarted agent can adopt
the attempt; only its process handle is not saved.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cluster import protocol
from cluster.agent import procs

Key = tuple[str, int]


@dataclass
class TrackedAttempt:
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
    log_streamed: int = 0  # bytes of the log streamed while it ran (cluster/agent/logstream.py)
    progress_offset: int = 0  # bytes of the progress file already read (cluster/agent/progress.py)
    notice_at: float | None = None
    kill_at: float | None = None
    killed_at: float | None = None
    reason: str | None = None
    ordered_at: float | None = None  # when the server signed its launch (server clock); None: unknown
    handle: procs.ProcessHandle | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> Key:
        return (str(self.job_id), self.attempt)

    @property
    def log_path(self) -> Path:
        return attempt_log_path(Path(self.job_dir), self.attempt)

    @property
    def exit_path(self) -> Path:
        return attempt_exit_path(Path(self.job_dir), self.attempt)

    def to_state(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "handle"}

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> "Attempt":
        """The saved attempt; keys this version does not know (a newer agent's) are ignored."""
        names = {f.name for f in fields(cls)} - {"handle"}
        return cls(**{k: v for k, v in data.items() if k in names})


def attempt_log_path(job_dir: Path, attempt: int) -> Path:
    """Where attempt ``attempt``'s stdout and stderr go (kept across requeues)."""
    return job_dir / f"attempt-{attempt}.log"


def attempt_exit_path(job_dir: Path, attempt: int) -> Path:
    """Where the shim records how attempt ``attempt`` ended (see shim.py)."""
    return job_dir / f"attempt-{attempt}.exit"


def marker_identity(checkpoint_dir: Path) -> list[int] | None:
    """[inode, mtime_ns] of the checkpoint-complete marker, None when there is none.

    Compared before and after an attempt: a marker the attempt wrote or
    replaced differs, one left by an earlier attempt does not.
    """
    try:
        st = (checkpoint_dir / protocol.CHECKPOINT_MARKER).stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return [st.st_ino, st.st_mtime_ns]


def read_exit_file(path: Path) -> dict[str, Any] | None:
    """The shim's exit record, or None while there is none (or it is not a JSON object)."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None

"""Reading the progress reports a job writes (``gpusched.job``) and forwarding them as REPORT_PROGRESS.

Every attempt gets ``GPUSCHED_PROGRESS_FILE`` = ``progress_path(job_dir, n)``,
a file in its working directory that the job appends JSON lines to. The job
is not trusted: the file may be huge, flooded, malformed, a FIFO or a symlink
to somewhere else. So the reader

* opens it with O_NOFOLLOW and O_NONBLOCK and reads only a regular file;
* reads at most ``MAX_READ_BYTES`` per poll, and when more than that is
  waiting skips to the newest ``MAX_READ_BYTES`` (a flood costs the same as
  one poll, and the newest report is what matters);
* checks every line with ``cluster.progress_schema.parse_line`` (size, JSON,
  types, finite numbers) and drops bad ones, logging a count (at most one
  warning per attempt per ``DROP_LOG_INTERVAL_S``), never the content;
* keeps at most ``MAX_METRIC_NAMES`` metric names per attempt (later new names
  are dropped);
* coalesces: all the valid lines of one poll become one report (the newest
  value of each field), and an attempt forwards at most one report per
  ``MIN_INTERVAL_S``; a poll that is not due reads nothing (the file is the
  buffer);
* never raises: an unexpected error is logged and the attempt's reports wait
  for the next poll.

The read offset is ``TrackedAttempt.progress_offset``, saved with the state file, so
a restarted agent neither repeats nor loses a report.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster import protocol
from cluster.agent.attempt import TrackedAttempt, Key
from cluster.progress_schema import MAX_LINE_BYTES, MAX_METRICS, parse_line

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 1.0
MAX_READ_BYTES = 64 * 1024
MAX_METRIC_NAMES = MAX_METRICS
DROP_LOG_INTERVAL_S = 10.0

Emit = Callable[[str, dict[str, Any]], None]


def progress_path(job_dir: Path, attempt: int) -> Path:
    """``<job_dir>/work/.gpusched-progress-<attempt>.jsonl``: in the job's own working directory."""
    return job_dir / "work" / f".gpusched-progress-{attempt}.jsonl"


@dataclass
class _Seen:
    """What the reader remembers of one attempt between polls (not saved: only rate and log limits)."""

    next_forward: float = 0.0
    names: set[str] = field(default_factory=set)
    dropped: int = 0
    first_reason: str = ""
    next_drop_log: float = 0.0


class ProgressReader:
    """Polls running attempts' progress files and emits REPORT_PROGRESS through ``emit``."""

    def __init__(self, emit: Emit, clock: Callable[[], float], min_interval: float = MIN_INTERVAL_S) -> None:
        self.emit = emit
        self.clock = clock
        self.min_interval = min_interval
        self._seen: dict[Key, _Seen] = {}

    def poll(self, att: TrackedAttempt, *, final: bool = False) -> bool:
        """Forward ``att``'s newest report if one is due (always when ``final``); True if the offset moved."""
        seen = self._seen.setdefault(att.key, _Seen())
        now = self.clock()
        if not final and now < seen.next_forward:
            return False
        before = att.progress_offset
        try:
            report = self._read(att, seen)
        except Exception:  # a hostile or broken file must never stop the agent
            log.exception("progress of %s attempt %d: unexpected error; skipped", att.job_id, att.attempt)
            seen.next_forward = now + self.min_interval  # and must not flood the agent's log either
            return False
        self._log_drops(att, seen, now, final)
        if report:
            self.emit(protocol.REPORT_PROGRESS, {"job_id": att.job_id, "attempt": att.attempt, **report})
            seen.next_forward = now + self.min_interval
        return att.progress_offset != before

    def forget(self, key: Key) -> None:
        self._seen.pop(key, None)

    def _read(self, att: TrackedAttempt, seen: _Seen) -> dict[str, Any]:
        chunk = self._chunk(att, seen)
        if not chunk:
            return {}
        lines = chunk.split(b"\n")
        rest = lines.pop()  # after the last newline: a line still being written
        if len(rest) > MAX_LINE_BYTES:  # not a line being written: a runaway one
            self._drop(seen, f"a line over {MAX_LINE_BYTES} bytes")
            rest = b""
        att.progress_offset -= len(rest)
        merged: dict[str, Any] = {}
        for line in lines:
            if line.strip():
                self._merge(merged, line, seen)
        return merged

    def _chunk(self, att: TrackedAttempt, seen: _Seen) -> bytes:
        """The unread bytes (the newest MAX_READ_BYTES of them); advances ``att.progress_offset`` past them."""
        path = progress_path(Path(att.job_dir), att.attempt)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return b""
        except OSError as exc:  # a symlink (ELOOP), no permission...
            self._drop(seen, f"cannot open {path.name}: {exc.strerror}")
            return b""
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or never end
                self._drop(seen, f"{path.name} is not a regular file")
                return b""
            size = info.st_size
            start = att.progress_offset if att.progress_offset <= size else 0  # truncated: start again
            skip_partial = False
            if size - start > MAX_READ_BYTES:
                self._drop(seen, f"{size - start - MAX_READ_BYTES} bytes skipped (more than {MAX_READ_BYTES} waiting)")
                start, skip_partial = size - MAX_READ_BYTES, True
            chunk = os.pread(fd, size - start, start)
        finally:
            os.close(fd)
        att.progress_offset = start + len(chunk)
        if skip_partial:  # we jumped into the middle of a line: drop up to the next newline
            cut = chunk.find(b"\n") + 1
            chunk = chunk[cut:] if cut else b""
        return chunk

    def _merge(self, merged: dict[str, Any], line: bytes, seen: _Seen) -> None:
        try:
            report = parse_line(line)
        except protocol.ProtocolError as exc:
            self._drop(seen, str(exc))
            return
        metrics = report.pop("metrics", None)
        merged.update(report)
        if metrics:
            kept = merged.setdefault("metrics", {})
            for name, value in metrics.items():
                if name not in seen.names and len(seen.names) >= MAX_METRIC_NAMES:
                    self._drop(seen, f"metric {name!r}: more than {MAX_METRIC_NAMES} metric names")
                    continue
                seen.names.add(name)
                kept[name] = value

    @staticmethod
    def _drop(seen: _Seen, reason: str) -> None:
        seen.dropped += 1
        seen.first_reason = seen.first_reason or reason

    @staticmethod
    def _log_drops(att: TrackedAttempt, seen: _Seen, now: float, final: bool) -> None:
        if seen.dropped and (final or now >= seen.next_drop_log):
            log.warning("progress of %s attempt %d: %d report(s) dropped (first: %s)",
                        att.job_id, att.attempt, seen.dropped, seen.first_reason)
            seen.dropped, seen.first_reason = 0, ""
            seen.next_drop_log = now + DROP_LOG_INTERVAL_S

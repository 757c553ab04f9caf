"""Streaming an attempt's log file as REPORT_LOG batches of complete lines, within bounds.

The log file on the node is the buffer and the whole record: the attempt's offset advances only
past lines that were handed to ``emit``, and it is saved with the state, so an agent that restarts
neither loses nor repeats a line. What reaches the portal is bounded (``LogLimits``), because every
streamed byte crosses the broker, a worker and PostgreSQL, and one job printing as fast as it can
must not load them for everyone else:

* **live**: a batch of at most ``chunk_bytes`` per attempt and log interval. When a job writes
  faster than that and more than ``max_lag_bytes`` wait unstreamed, the stream jumps to the newest
  lines, so the page shows what the job does now rather than what it did minutes ago;
* **per attempt**: at most ``stream_bytes`` are streamed while it runs;
* **at the end**: the last ``final_bytes`` of what was not streamed, since the end of a log (the
  traceback, the final metrics) is what its owner reads first.

Every jump is one ``[agent]`` line in the stream saying how many bytes were left out and where the
full log is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cluster import protocol
from cluster.agent.attempt import TrackedAttempt
from cluster.agent.logtail import MAX_LINE_BYTES, read_new_lines

EmitLines = Callable[[TrackedAttempt, list[str]], None]

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True, slots=True)
class LogLimits:
    """How much of an attempt's log is streamed to the portal (see the module doc)."""

    chunk_bytes: int = 64 * KiB
    max_lag_bytes: int = 4 * MiB
    stream_bytes: int = 256 * MiB
    final_bytes: int = 1 * MiB

    def __post_init__(self) -> None:
        for name in ("chunk_bytes", "max_lag_bytes", "stream_bytes", "final_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def line_start_at_or_after(path: Path, position: int) -> int:
    """Where to resume reading the file near byte ``position`` without cutting a line in two.

    The first line that starts at or after ``position``; when ``position`` lies in the file's last
    line, which has no newline yet, that line's start, so a log's last line is never cut or left
    out. A line longer than ``MAX_LINE_BYTES`` either way is cut at ``position``, as
    ``read_new_lines`` cuts a runaway line."""
    if position <= 0:
        return 0
    with open(path, "rb") as f:
        f.seek(position - 1)
        ahead = f.read(MAX_LINE_BYTES + 1)
        newline = ahead.find(b"\n")
        if newline >= 0:
            return position + newline
        if len(ahead) > MAX_LINE_BYTES:
            return position
        back_from = max(0, position - MAX_LINE_BYTES)
        f.seek(back_from)
        behind = f.read(position - back_from)
    newline = behind.rfind(b"\n")
    if newline >= 0:
        return back_from + newline + 1
    return 0 if back_from == 0 else position


def _skip_to(att: TrackedAttempt, position: int, node: str, why: str, emit: EmitLines) -> None:
    """Move ``att``'s offset to the line starting at or after ``position`` and say so in the stream."""
    start = line_start_at_or_after(att.log_path, position)
    if start <= att.log_offset:
        return
    skipped = start - att.log_offset
    att.log_offset = start
    emit(att, [f"[agent] {skipped} bytes of log not streamed ({why}); "
               f"the full log is {att.log_path} on node {node}"])


def _emit_batch(att: TrackedAttempt, max_bytes: int, emit: EmitLines, final: bool = False) -> int:
    """Emit the next complete lines (at most ``max_bytes``); the bytes streamed."""
    lines, offset = read_new_lines(att.log_path, att.log_offset, max_bytes, final=final)
    if not lines:
        return 0
    streamed = offset - att.log_offset
    att.log_offset = offset
    att.log_streamed += streamed
    emit(att, lines)
    return streamed


def stream_new_lines(att: TrackedAttempt, limits: LogLimits, node: str, emit: EmitLines) -> bool:
    """One live batch of ``att``'s new lines, after a jump to the newest if the stream lags too
    far behind; nothing once the attempt has streamed ``limits.stream_bytes`` (the batch that
    reaches it is whole, so at most one batch more). True if anything was emitted."""
    if att.log_streamed >= limits.stream_bytes:
        return False
    size, before = _size(att.log_path), att.log_offset
    if size - att.log_offset > limits.max_lag_bytes:
        _skip_to(att, size - limits.chunk_bytes, node, "the job writes faster than its log is streamed", emit)
    if _emit_batch(att, limits.chunk_bytes, emit) == 0:
        return att.log_offset != before
    if att.log_streamed >= limits.stream_bytes:
        emit(att, [f"[agent] this attempt has streamed {limits.stream_bytes} bytes of log, its limit; "
                   f"only the end of its log follows when it ends; the full log is {att.log_path} on node {node}"])
    return True


def flush_final_log(att: TrackedAttempt, limits: LogLimits, node: str, emit: EmitLines) -> None:
    """Emit the end of an ended attempt's log, a last line without newline included: all of what
    was not streamed if that is at most ``limits.final_bytes``, else a line saying what was left
    out and then the last ``final_bytes`` (from the first line that starts within them)."""
    size = _size(att.log_path)
    if size - att.log_offset > limits.final_bytes:
        _skip_to(att, size - limits.final_bytes, node, "only the end of a long log is streamed", emit)
    while att.log_offset < size:
        if _emit_batch(att, limits.chunk_bytes, emit, final=True) == 0:
            break


def log_report(att: TrackedAttempt, lines: list[str]) -> tuple[str, dict]:
    """The REPORT_LOG (task, kwargs) carrying ``lines`` of ``att``."""
    return protocol.REPORT_LOG, {"job_id": att.job_id, "attempt": att.attempt, "lines": lines}

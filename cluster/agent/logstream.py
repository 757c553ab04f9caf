"""Streaming an attempt's log file as REPORT_LOG batches of complete lines.

The log file is the buffer: the attempt's offset advances only past lines
that were handed to ``emit``, and it is saved with the state, so an agent that
restarts neither loses nor repeats a line.
"""

from __future__ import annotations

from collections.abc import Callable

from cluster import protocol
from cluster.agent.attempt import TrackedAttempt
from cluster.agent.logtail import read_new_lines

EmitLines = Callable[[TrackedAttempt, list[str]], None]


def stream_new_lines(att: TrackedAttempt, chunk_bytes: int, emit: EmitLines) -> bool:
    """Emit the complete new lines of ``att``'s log (at most ``chunk_bytes``); True if any."""
    lines, offset = read_new_lines(att.log_path, att.log_offset, chunk_bytes)
    if not lines:
        return False
    att.log_offset = offset
    emit(att, lines)
    return True


def flush_final_log(att: TrackedAttempt, chunk_bytes: int, budget: int, node: str, emit: EmitLines) -> None:
    """Emit the rest of an ended attempt's log, a last line without newline included, up to ``budget`` bytes.

    Beyond the budget one line says how many bytes were not streamed and where the full log is.
    """
    while budget > 0:
        lines, offset = read_new_lines(att.log_path, att.log_offset, min(chunk_bytes, budget), final=True)
        if not lines:
            break
        budget -= offset - att.log_offset
        att.log_offset = offset
        emit(att, lines)
    try:
        left = att.log_path.stat().st_size - att.log_offset
    except FileNotFoundError:
        left = 0
    if left > 0:
        emit(att, [f"[agent] {left} more bytes not streamed; the full log is {att.log_path} on node {node}"])


def log_report(att: TrackedAttempt, lines: list[str]) -> tuple[str, dict]:
    """The REPORT_LOG (task, kwargs) carrying ``lines`` of ``att``."""
    return protocol.REPORT_LOG, {"job_id": att.job_id, "attempt": att.attempt, "lines": lines}

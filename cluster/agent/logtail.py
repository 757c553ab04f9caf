"""Incremental reading of an attempt's log file as complete lines."""

from __future__ import annotations

from pathlib import Path

# A "line" longer than this without a newline is cut and sent in pieces, so one
# runaway line cannot stall streaming.
MAX_LINE_BYTES = 16 * 1024


def read_new_lines(path: Path, offset: int, max_bytes: int, final: bool = False) -> tuple[list[str], int]:
    """Complete lines after byte ``offset`` (at most ``max_bytes`` read) and the new offset.

    A trailing partial line is left for the next call unless ``final`` (the
    writer has ended) or it is longer than MAX_LINE_BYTES. Bytes that are not
    UTF-8 are replaced, line endings are stripped. A missing file reads as empty.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read(max_bytes)
    except FileNotFoundError:
        return [], offset
    if not chunk:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    if end == 0 and (final or len(chunk) >= MAX_LINE_BYTES):
        end = len(chunk)
    elif final and end < len(chunk) and len(chunk) < max_bytes:
        end = len(chunk)
    if end == 0:
        return [], offset
    text = chunk[:end].decode("utf-8", errors="replace")
    lines = [line.rstrip("\r") for line in text.split("\n")]
    if lines and lines[-1] == "" and text.endswith("\n"):
        lines.pop()
    return lines, offset + end

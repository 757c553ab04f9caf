"""Streaming an attempt's log as REPORT_LOG batches of complete lines, the last partial line flushed at its exit."""

from __future__ import annotations


def test_log_lines_are_streamed_incrementally_and_the_tail_flushed_at_exit(h):
    h.launch("lg", 1, "echo one; sleep 0.3; printf 'two\\nthree-no-newline'; sleep 60")
    h.wait_line("lg", lambda l: l == "two")
    assert h.lines("lg") == ["one", "two"]  # the partial line waits for its newline
    h.sup.kill({"job_id": "lg", "attempt": 1, "grace_period": 0})
    h.exited("lg")
    assert h.lines("lg") == ["one", "two", "three-no-newline"]

"""Reading an attempt's log file incrementally as complete, bounded lines."""

from __future__ import annotations

from cluster.agent import logtail


def test_reads_complete_lines_and_keeps_the_partial_one(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"one\r\ntwo\nthr")
    lines, offset = logtail.read_new_lines(log, 0, 1024)
    assert (lines, offset) == (["one", "two"], 9)
    assert logtail.read_new_lines(log, offset, 1024) == ([], 9)
    with open(log, "ab") as f:
        f.write(b"ee\n")
    assert logtail.read_new_lines(log, offset, 1024) == (["three"], 15)


def test_final_read_includes_the_partial_line_and_bad_bytes_are_replaced(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"ok\n\xff\xfeend")
    assert logtail.read_new_lines(log, 3, 1024, final=True) == (["\ufffd\ufffdend"], 8)


def test_read_is_bounded_and_a_runaway_line_is_cut(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"a\nb\nc\n")
    assert logtail.read_new_lines(log, 0, 4) == (["a", "b"], 4)
    log.write_bytes(b"x" * (logtail.MAX_LINE_BYTES + 10))
    lines, offset = logtail.read_new_lines(log, 0, logtail.MAX_LINE_BYTES)
    assert offset == logtail.MAX_LINE_BYTES and len(lines[0]) == logtail.MAX_LINE_BYTES


def test_missing_log_reads_as_empty(tmp_path):
    assert logtail.read_new_lines(tmp_path / "nope.log", 0, 10) == ([], 0)

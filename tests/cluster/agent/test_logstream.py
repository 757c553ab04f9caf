"""Streaming an attempt's log as REPORT_LOG batches of complete lines, within bounds: a live batch
per interval, a jump to the newest lines when the stream lags, a cap per attempt, and the end of the
log (not its middle) when the attempt ends."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cluster.agent.logstream import LogLimits, flush_final_log, line_start_at_or_after, stream_new_lines

KiB = 1024


@dataclass
class FakeAttempt:
    """The fields of TrackedAttempt that streaming reads and writes."""

    log_path: Path
    job_id: str = "7"
    attempt: int = 1
    log_offset: int = 0
    log_streamed: int = 0
    batches: list[list[str]] = field(default_factory=list)

    def emit(self, att: "FakeAttempt", lines: list[str]) -> None:
        assert att is self
        self.batches.append(lines)

    @property
    def lines(self) -> list[str]:
        return [line for batch in self.batches for line in batch]


def numbered(path: Path, first: int, count: int, end: str = "\n") -> None:
    """Append lines 'line <n>' padded to 100 bytes with their newline."""
    with open(path, "a") as f:
        for n in range(first, first + count):
            f.write(f"line {n:07d} ".ljust(99, "x") + end)


def skipped_bytes(line: str) -> int:
    found = re.match(r"\[agent\] (\d+) bytes of log not streamed", line)
    assert found, line
    return int(found.group(1))


@pytest.fixture
def att(tmp_path: Path) -> FakeAttempt:
    path = tmp_path / "attempt-1.log"
    path.touch()
    return FakeAttempt(log_path=path)


def test_a_log_within_its_lag_is_streamed_whole_in_order(att):
    limits = LogLimits(chunk_bytes=4 * KiB, max_lag_bytes=64 * KiB)
    numbered(att.log_path, 0, 300)  # 30,000 bytes: below the lag bound
    while stream_new_lines(att, limits, "n1", att.emit):
        pass
    assert [line[:12] for line in att.lines] == [f"line {n:07d}" for n in range(300)]
    assert all(len(batch) * 100 <= 4 * KiB for batch in att.batches)
    assert att.log_streamed == att.log_offset == 30_000


def test_a_stream_that_lags_too_far_jumps_to_the_newest_lines_and_says_what_it_left_out(att):
    limits = LogLimits(chunk_bytes=4 * KiB, max_lag_bytes=64 * KiB)
    numbered(att.log_path, 0, 10_000)  # 1,000,000 bytes, far past the lag bound
    assert stream_new_lines(att, limits, "n1", att.emit)
    marker, *lines = att.lines
    assert "the job writes faster than its log is streamed" in marker
    assert f"the full log is {att.log_path} on node n1" in marker
    first = int(lines[0][5:12])
    assert skipped_bytes(marker) == first * 100  # up to a line's start, nothing cut in two
    assert 1_000_000 - first * 100 <= 4 * KiB + 100  # what is left is the newest chunk
    while stream_new_lines(att, limits, "n1", att.emit):
        pass
    assert att.lines[-1].startswith("line 0009999")
    assert att.log_offset == 1_000_000 and att.log_streamed < 8 * KiB


def test_an_attempt_streams_no_more_than_its_limit_while_it_runs(att):
    limits = LogLimits(chunk_bytes=4 * KiB, max_lag_bytes=1024 * KiB, stream_bytes=10 * KiB)
    numbered(att.log_path, 0, 500)
    while stream_new_lines(att, limits, "n1", att.emit):
        pass
    assert 10 * KiB <= att.log_streamed < 10 * KiB + 4 * KiB
    assert "its limit; only the end of its log follows when it ends" in att.lines[-1]
    assert sum("its limit" in line for line in att.lines) == 1
    numbered(att.log_path, 500, 10)
    assert not stream_new_lines(att, limits, "n1", att.emit)


def test_the_end_of_a_long_log_is_streamed_when_the_attempt_ends_not_its_middle(att):
    limits = LogLimits(chunk_bytes=4 * KiB, max_lag_bytes=1024 * KiB, final_bytes=10 * KiB)
    numbered(att.log_path, 0, 5_000)
    with open(att.log_path, "a") as f:
        f.write("Traceback: the last line, without a newline")
    flush_final_log(att, limits, "n1", att.emit)
    marker, *lines = att.lines
    assert "only the end of a long log is streamed" in marker
    assert lines[-1] == "Traceback: the last line, without a newline"
    assert lines[0].startswith("line ") and len(lines[0]) == 99  # whole lines only
    assert sum(len(line) + 1 for line in lines) <= 10 * KiB + 1
    assert att.log_offset == att.log_path.stat().st_size


def test_a_short_rest_is_streamed_whole_at_the_end_even_after_the_limit(att):
    limits = LogLimits(chunk_bytes=4 * KiB, stream_bytes=4 * KiB, final_bytes=64 * KiB)
    numbered(att.log_path, 0, 100)
    while stream_new_lines(att, limits, "n1", att.emit):
        pass
    streamed = len(att.lines)
    flush_final_log(att, limits, "n1", att.emit)
    rest = [line for line in att.lines[streamed:] if not line.startswith("[agent]")]
    assert [int(line[5:12]) for line in rest] == list(range(100 - len(rest), 100))
    assert int(att.lines[streamed - 2][5:12]) + 1 == int(rest[0][5:12])  # nothing left out


def test_line_start_at_or_after(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"ab\ncd\n\nef")
    assert [line_start_at_or_after(path, p) for p in range(0, 10)] == [0, 3, 3, 3, 6, 6, 6, 7, 7, 7]


def test_a_runaway_line_is_cut_where_the_jump_lands(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"x" * 100_000)
    assert line_start_at_or_after(path, 50_000) == 50_000


@pytest.mark.parametrize("name", ["chunk_bytes", "max_lag_bytes", "stream_bytes", "final_bytes"])
def test_limits_below_one_byte_are_refused(name):
    with pytest.raises(ValueError, match=name):
        LogLimits(**{name: 0})


def test_log_lines_are_streamed_incrementally_and_the_tail_flushed_at_exit(h):
    h.launch("lg", 1, "echo one; sleep 0.3; printf 'two\\nthree-no-newline'; sleep 60")
    h.wait_line("lg", lambda l: l == "two")
    assert h.lines("lg") == ["one", "two"]  # the partial line waits for its newline
    h.sup.kill({"job_id": "lg", "attempt": 1, "grace_period": 0})
    h.exited("lg")
    assert h.lines("lg") == ["one", "two", "three-no-newline"]


def test_a_job_that_floods_its_log_ends_with_its_last_lines_streamed(h):
    h.sup.log_limits = LogLimits(chunk_bytes=16 * KiB, max_lag_bytes=64 * KiB, final_bytes=32 * KiB)
    h.launch("fl", 1, "yes 0123456789 | head -c 5000000; echo; echo the-last-line")
    h.exited("fl")
    lines = h.lines("fl")
    assert lines[-1] == "the-last-line"
    assert any("bytes of log not streamed" in line for line in lines)
    assert sum(len(line) + 1 for line in lines) < 200 * KiB  # of 5 MB written


def test_a_long_last_line_is_streamed_whole_at_the_end(att):
    limits = LogLimits(chunk_bytes=8 * KiB, final_bytes=1 * KiB)
    numbered(att.log_path, 0, 100)
    with open(att.log_path, "a") as f:
        f.write("E" * 3000)  # longer than the final budget, shorter than a runaway line
    flush_final_log(att, limits, "n1", att.emit)
    assert att.lines[-1] == "E" * 3000
    assert att.lines[-2].startswith("[agent] 10000 bytes of log not streamed")


def test_a_jump_onto_an_unfinished_last_line_counts_as_progress(att):
    limits = LogLimits(chunk_bytes=300, max_lag_bytes=1 * KiB)
    numbered(att.log_path, 0, 50)
    with open(att.log_path, "a") as f:
        f.write("p" * 400)  # the line being written, no newline yet
    assert stream_new_lines(att, limits, "n1", att.emit)  # the jump is state to save, though no line was read
    assert skipped_bytes(att.lines[-1]) == 5_000 and att.log_offset == 5_000

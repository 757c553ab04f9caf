"""The progress bar: drawn on a terminal once the run has taken longer than the
delay, never on a stream that is not a terminal."""

from __future__ import annotations

import io

from scheduler.sim.progress import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_label_and_the_final_count():
    stream = Terminal()
    bar = ProgressBar("fitgpp", stream, delay=0.0)
    bar(512, 1000)
    bar(1000, 1000)
    out = stream.getvalue()
    assert "fitgpp" in out and "1000/1000" in out
    assert out.endswith("\n")


def test_a_log_file_gets_nothing():
    stream = io.StringIO()
    bar = ProgressBar("fitgpp", stream, delay=0.0)
    bar(512, 1000)
    bar(1000, 1000)
    assert stream.getvalue() == ""


def test_a_run_shorter_than_the_delay_shows_no_bar():
    stream = Terminal()
    bar = ProgressBar("fitgpp", stream, delay=3600.0)
    bar(512, 1000)
    bar(1000, 1000)
    assert stream.getvalue() == ""

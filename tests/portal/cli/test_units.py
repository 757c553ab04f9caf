"""Parsing of durations and memory sizes typed on the command line."""

from __future__ import annotations

import pytest

from portal.cli.units import format_duration, parse_duration, parse_memory_gb


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90), ("0", 0), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400),
        ("1h30m", 5400), ("1.5h", 5400), ("1:30", 90), ("01:00:00", 3600),
        ("2-03", 2 * 86400 + 3 * 3600), ("2-03:04", 2 * 86400 + 3 * 3600 + 240),
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 245), (" 45m ", 2700),
    ],
)
def test_parse_duration_accepts_seconds_units_and_clock_forms(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"), ("abc", "invalid duration 'abc'"), ("1h30", "invalid duration"),
        ("1:60", "below 60"), ("-5", "cannot be negative"), ("-1-00:00", "cannot be negative"),
        ("1:2:3:4", "invalid duration"),
        ("x-01:00", "invalid duration"), ("5", None),
        ("²", "invalid duration"), ("1:²", "invalid duration"), ("²-01:00", "invalid duration"),
    ],
)
def test_parse_duration_rejects_malformed_text(text: str, message: str | None) -> None:
    if message is None:  # control row: the pattern accepts well-formed input
        assert parse_duration(text) == 5
        return
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "gb"),
    [("16", 16.0), ("1.5", 1.5), ("512M", 0.5), ("16G", 16.0), ("16gb", 16.0), ("2GiB", 2.0),
     ("1T", 1024.0), ("1048576K", 1.0)],
)
def test_parse_memory_gb(text: str, gb: float) -> None:
    assert parse_memory_gb(text) == pytest.approx(gb)


@pytest.mark.parametrize("text", ["", "G", "16X", "-1", "1,5G"])
def test_parse_memory_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ValueError, match="invalid memory size"):
        parse_memory_gb(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0, "0:00:00"), (59.6, "0:01:00"), (3725, "1:02:05"),
     (2 * 86400 + 3 * 3600 + 5, "2-03:00:05")],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text

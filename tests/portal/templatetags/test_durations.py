"""The job page's lengths of time."""

from __future__ import annotations

import pytest

from portal.templatetags.durations import duration


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "none"), (0, "0 s"), (30, "30 s"), (59.4, "59 s"), (90, "0:01:30 (90 s)"),
    (5400, "1:30:00 (5400 s)"), (90000, "1-01:00:00 (90000 s)"),
])
def test_duration(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text

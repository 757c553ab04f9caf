"""The query of ``GET /api/v1/jobs/{id}/logs/``: which attempt, and which lines of its log.

``attempt`` (>= 1; default the latest), then either ``offset`` (lines skipped from the start, for
polling) or ``tail`` (the last N lines), and ``limit``, the most lines one answer carries: a log
of millions of lines is read a page at a time, never whole (``scheduler.attempt_log``).
"""

from __future__ import annotations

from collections.abc import Mapping

LOG_PAGE_LINES = 10_000
LOG_PAGE_MAX_LINES = 100_000

_MINIMUM = {"attempt": 1, "offset": 0, "limit": 1, "tail": 1}


def log_query(params: Mapping[str, str]) -> tuple[dict[str, int], dict[str, list[str]]]:
    """The query's numbers and the errors by field name (``{}`` when valid). Empty values are absent."""
    numbers: dict[str, int] = {}
    errors: dict[str, list[str]] = {}
    for name, minimum in _MINIMUM.items():
        raw = params.get(name)
        if raw is None or raw == "":
            continue
        if not (raw.isascii() and raw.isdigit()) or int(raw) < minimum:
            errors[name] = ["Must be a positive integer." if minimum else "Must be an integer >= 0."]
        else:
            numbers[name] = int(raw)
    if numbers.get("limit", 0) > LOG_PAGE_MAX_LINES:
        errors["limit"] = [f"Must be at most {LOG_PAGE_MAX_LINES}."]
    if "offset" in numbers and "tail" in numbers:
        errors["tail"] = ["Give either offset or tail, not both."]
    return numbers, errors

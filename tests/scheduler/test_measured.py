"""The registry of what jobs measured of themselves: sources answer, a failing one is skipped."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler import measured


@pytest.fixture
def sources(monkeypatch):  # noqa: ANN001, ANN201
    """Empty registries for the test (the installed apps' sources are put back after)."""
    monkeypatch.setattr(measured, "_steps_sources", [])
    monkeypatch.setattr(measured, "_remaining_sources", [])


def broken(*args):  # noqa: ANN002, ANN201
    raise RuntimeError("source down")


def test_nothing_registered_measures_nothing(sources) -> None:
    assert measured.steps([1, 2]) == {} and measured.remaining_seconds([1], timezone.now()) == {}


def test_sources_answer_once_each_and_a_failing_one_is_skipped(sources) -> None:
    def remaining(ids, now):  # noqa: ANN001, ANN202
        return {i: 30 for i in ids if i == 7}

    def steps(ids):  # noqa: ANN001, ANN202
        return {i: (5.0, 10) for i in ids}

    for _ in range(2):
        measured.add_remaining_source(remaining)
        measured.add_steps_source(steps)
    measured.add_remaining_source(broken)
    measured.add_steps_source(broken)
    assert measured._remaining_sources == [remaining, broken]
    assert measured.remaining_seconds([7, 8], timezone.now()) == {"7": 30.0}
    assert measured.steps([3]) == {3: (5.0, 10)}


def test_the_progress_app_is_registered_when_django_starts() -> None:
    from jobprogress.selectors import reported_steps, running_remaining_seconds

    assert reported_steps in measured._steps_sources
    assert running_remaining_seconds in measured._remaining_sources

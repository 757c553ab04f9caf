"""Which transitions notify, and the event-name lists users save."""

from __future__ import annotations

import pytest

from notifications.events import clean_kinds, kind_of


@pytest.mark.parametrize("from_state, to_state, kind", [
    ("STARTING", "RUNNING", "started"), ("RUNNING", "PREEMPTING", "preempted"), ("PREEMPTING", "PENDING", "requeued"),
    ("NODE_LOST", "PENDING", "requeued"), ("RUNNING", "COMPLETED", "finished"), ("CANCELLING", "CANCELLED", "finished"),
    ("RUNNING", "FAILED", "failed"), ("RUNNING", "TIMEOUT", "failed"), ("", "PENDING", None),
    ("PENDING", "STARTING", None), ("RUNNING", "CANCELLING", None),
    ("PENDING", "PENDING", None),  # a waiting job held or released (scheduler.holds): not requeued
])
def test_kind_of_a_transition(from_state, to_state, kind) -> None:
    assert kind_of(from_state, to_state) == kind


def test_the_idle_warning_is_a_running_to_running_event_of_its_own_kind() -> None:
    assert kind_of("RUNNING", "RUNNING", "IdleWarning") == "idle_warning"
    assert kind_of("RUNNING", "CANCELLING", "IDLE_RECLAIMED") is None
    assert kind_of("STARTING", "RUNNING", "Started") == "started"


def test_saved_lists_are_checked_and_ordered() -> None:
    assert clean_kinds(["failed", "started"]) == ["started", "failed"]
    with pytest.raises(ValueError, match="'exploded'"):
        clean_kinds(["exploded"])
    with pytest.raises(ValueError):
        clean_kinds("started")

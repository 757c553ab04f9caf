"""Array specifications parse as Slurm's --array does; bad ones are refused with the part at fault."""

from __future__ import annotations

import pytest

from scheduler.core.arrays import ArrayError, parse_array, parse_task, split_limit, task_name, throttled


@pytest.mark.parametrize("text, indices", [
    ("0-9", tuple(range(10))),
    ("0-9:2", (0, 2, 4, 6, 8)),
    ("1,3,5", (1, 3, 5)),
    (" 7 ", (7,)),
    ("0-2,1-3", (0, 1, 2, 3)),
    ("5,1", (5, 1)),
])
def test_ranges_steps_and_lists(text, indices):
    assert parse_array(text, 500) == indices


@pytest.mark.parametrize("text, fragment", [
    ("", "give indices"),
    ("9-0", "ends before it starts"),
    ("0-9:0", "step must be at least 1"),
    ("3:2", "a step needs a range"),
    ("a-b", "is not an index"),
    ("-1", "is not an index"),
    ("0-9%2", "comes once, last"),
    ("0-1000000", "is not an index"),
    ("0-500", "at most 500 tasks"),
    ("1,,2", "is not an index"),
    ("0-9;rm -rf /", "is not an index"),
    ("１-３", "is not an index"),
])
def test_bad_specifications_are_refused(text, fragment):
    with pytest.raises(ArrayError, match=fragment):
        parse_array(text, 500)


def test_task_names_round_trip():
    assert task_name(12, 3) == "12_3"
    assert parse_task("12_3") == (12, 3) and parse_task("12") == (12, None)
    for bad in ("", "_3", "12_", "12_x", "x", "12_3_4", "1" * 19, "12_1234567"):
        assert parse_task(bad) is None


def test_a_limit_is_split_off_and_checked():
    assert split_limit("0-9%2") == ("0-9", 2) and split_limit("1,3") == ("1,3", None)
    for bad in ("0-9%0", "0-9%", "0-9%x", "0-9%2%3", "0-9%-1"):
        with pytest.raises(ArrayError, match="at least 1"):
            split_limit(bad)


def test_throttled_holds_the_tasks_past_each_arrays_room_in_queue_order():
    pending = [("a1", 1, 2), ("b1", 2, 1), ("a2", 1, 2), ("a3", 1, 2), ("b2", 2, 1)]
    assert throttled(pending, {}) == {"a3", "b2"}
    assert throttled(pending, {1: 1}) == {"a2", "a3", "b2"}
    assert throttled(pending, {1: 3, 2: 0}) == {"a1", "a2", "a3", "b2"}

"""The GPU count of a stored allocation."""

from __future__ import annotations

from scheduler.gpu_allocation import gpu_count


def test_counts_the_indices_on_every_node():
    assert gpu_count({"n1": [0, 1, 2], "n2": [5]}) == 4


def test_none_and_empty_allocations_hold_no_gpu():
    assert gpu_count(None) == 0
    assert gpu_count({}) == 0
    assert gpu_count({"n1": []}) == 0

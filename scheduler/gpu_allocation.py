"""An attempt's GPU allocation as it is stored (``Attempt.gpu_allocation``, and the rows read
from it): a mapping of node name to the GPU indices the attempt holds there."""

from __future__ import annotations

from typing import Mapping, Sequence


def gpu_count(allocation: Mapping[str, Sequence[int]] | None) -> int:
    """How many GPUs ``allocation`` holds over all its nodes (0 for None or an empty one)."""
    return sum(len(indices) for indices in (allocation or {}).values())

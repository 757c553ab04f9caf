"""Grace periods (time to checkpoint and exit after a preemption notice).

Shared by the synthetic generator and the Philly adapter so that both draw
from one documented distribution: uniform over a few typical checkpoint
times, from a small model saved in seconds to a large one taking ten minutes.
"""

from __future__ import annotations

import random
import zlib

GRACE_CHOICES: tuple[float, ...] = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def draw_grace(rng: random.Random, choices: tuple[float, ...] = GRACE_CHOICES) -> float:
    """One grace period, uniform over ``choices``."""
    return choices[rng.randrange(len(choices))]


def job_rng(seed: int, job_id: str) -> random.Random:
    """A generator that depends only on ``seed`` and the job's id.

    Draws for a job then do not change when a window of the trace is taken or
    rows are reordered.
    """
    return random.Random((seed << 32) ^ zlib.crc32(job_id.encode()))

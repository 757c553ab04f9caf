"""The built-in scheduling policies; importing this package registers them all.

``fifo``, ``fifo-strict``, ``te-priority``, ``preempt-random``,
``preempt-newest`` and ``fitgpp``: see docs/policies.md. ``rubick`` and the
baselines that keep the user's plan: see docs/rubick.md.
"""

from scheduler.core.policies.base import QueuePolicy
from scheduler.core.policies.fifo import Fifo, FifoStrict
from scheduler.core.policies.fitgpp import FitGpp
from scheduler.core.policies.fitgpp_shrink import FitGppShrink
from scheduler.core.policies.fixed_plan import FifoFixed, Synergy, Tiresias
from scheduler.core.policies.preemptive import PreemptivePolicy, PreemptNewest, PreemptRandom
from scheduler.core.policies.rubick import Rubick
from scheduler.core.policies.te_priority import TePriority

__all__ = [
    "Fifo",
    "FifoFixed",
    "FifoStrict",
    "FitGpp",
    "FitGppShrink",
    "PreemptNewest",
    "PreemptRandom",
    "PreemptivePolicy",
    "QueuePolicy",
    "Rubick",
    "Synergy",
    "TePriority",
    "Tiresias",
]

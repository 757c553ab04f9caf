"""The built-in scheduling policies; importing this package registers them all.

``fifo``, ``fifo-strict``, ``te-priority``, ``preempt-random``,
``preempt-newest`` and ``fitgpp``: see docs/policies.md.
"""

from scheduler.core.policies.base import QueuePolicy
from scheduler.core.policies.fifo import Fifo, FifoStrict
from scheduler.core.policies.fitgpp import FitGpp
from scheduler.core.policies.preemptive import PreemptivePolicy, PreemptNewest, PreemptRandom
from scheduler.core.policies.te_priority import TePriority

__all__ = [
    "Fifo",
    "FifoStrict",
    "FitGpp",
    "PreemptNewest",
    "PreemptRandom",
    "PreemptivePolicy",
    "QueuePolicy",
    "TePriority",
]

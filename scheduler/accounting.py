"""Progress and lost-work accounting of attempts, for the scheduler and the preemption ledger.

The rule is deliberately simple, because the scheduler cannot see inside a job:

* An attempt's *work* is the time from its start to the moment it was told
  to stop (the preemption or cancel notice) or, without a notice, to its end;
  an attempt after the first spends its first ``resume_overhead`` seconds
  restoring its checkpoint, which is not work.
* A job's ``progress_seconds`` is the sum of the work of its attempts that was
  *kept*: attempts that completed, or were stopped and wrote a checkpoint.
  While an attempt runs, the scheduler adds its work so far.
* Work of an attempt that ended without a checkpoint (killed after the grace
  period without a marker, node lost) is *lost*; the ledger records it as
  GPU-seconds (work times the attempt's GPUs). A checkpointed attempt loses 0:
  a job that checkpoints on the notice keeps everything up to it. A job that
  only checkpoints periodically loses the work since its last checkpoint,
  which the scheduler cannot see; it is counted as kept.
"""

from __future__ import annotations

from datetime import datetime


def attempt_work_seconds(
    started_at: datetime, until: datetime, number: int, resume_overhead: float
) -> float:
    """Seconds of useful work of attempt ``number`` that ran from ``started_at`` to ``until``."""
    overhead = resume_overhead if number > 1 else 0.0
    return max(0.0, (until - started_at).total_seconds() - overhead)


def lost_gpu_seconds(work_seconds: float, gpus: int, checkpointed: bool) -> float:
    """GPU-seconds of ``work_seconds`` on ``gpus`` GPUs not kept (0 when checkpointed)."""
    return 0.0 if checkpointed else work_seconds * gpus

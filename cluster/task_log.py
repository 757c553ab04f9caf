"""Keep the workers' and beat's logs readable: no line per routine task unless asked.

At Celery's INFO level every task a worker runs gives two lines ("received", "succeeded") and
every periodic task one more in beat's log ("Sending due task"). The routine tasks are most of them:
every agent's heartbeat every few seconds, the telemetry drain every second, the scheduling tick,
progress and log batches, the forecasts' recomputation. On a two-node laptop stack that is about
four lines a second; on a cluster of hundreds of nodes hundreds, which bury the lines that matter
(a job started or exited, a node registered, a refused report, a failure) and fill disks.

``RoutineTaskFilter`` drops only those INFO lines of the tasks in ``ROUTINE_TASKS``; a routine task
that fails or is retried is still logged, and every other task keeps its lines.
``LOG_ROUTINE_TASKS=1`` keeps them all (for debugging the loop). Installed by ``cluster.broker``
when a worker or beat sets up its logging.
"""

from __future__ import annotations

import logging

from celery.app import trace

ROUTINE_TASKS = frozenset({
    "cluster.heartbeat",
    "cluster.log",
    "cluster.progress",
    "cluster.telemetry",
    "gputelemetry.drain",
    "scheduler.tick",
    "scheduler.run_cycle",
    "scheduler.recompute_forecasts",
})
"""Tasks that run every few seconds per node or per cluster and whose success says nothing new."""

#: Loggers whose records the filter looks at: a worker's "received", its pool's "succeeded",
#: beat's "Sending due task".
LOGGERS = ("celery.worker.strategy", "celery.app.trace", "celery.beat")
_PER_TASK_FORMATS = frozenset({trace.LOG_RECEIVED, trace.LOG_SUCCESS})
_BEAT_SENDING = "Scheduler: Sending due task %s (%s)"


class RoutineTaskFilter(logging.Filter):
    """Drops the INFO records that say a routine task was received, succeeded or was sent by beat."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        return _task_name(record) not in ROUTINE_TASKS


def _task_name(record: logging.LogRecord) -> str | None:
    """The task a per-task record is about, None for any other record."""
    if record.msg in _PER_TASK_FORMATS:
        data = getattr(record, "data", None)
        if isinstance(data, dict):
            return data.get("name")
        return None
    if record.msg == _BEAT_SENDING and isinstance(record.args, tuple) and len(record.args) == 2:
        return str(record.args[1])
    return None


_FILTER = RoutineTaskFilter()


def install(keep_routine: bool) -> None:
    """Filter the routine tasks' lines out of the Celery loggers, unless ``keep_routine``. Safe to
    call more than once."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if keep_routine:
            logger.removeFilter(_FILTER)
        elif _FILTER not in logger.filters:
            logger.addFilter(_FILTER)

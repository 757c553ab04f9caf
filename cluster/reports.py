"""Agent reports about attempts: started, exited, log lines.

Every function here runs in its own transaction, locks the job row it
changes (``select_for_update``), checks that the report is about the job's
*current* attempt on a node where that attempt still holds GPUs, and only then
writes; a late, repeated or stale report changes nothing (a stale process is
told to stop instead). Agent commands and scheduling requests are sent only
after commit. How an exit settles the attempt and the job: ``cluster.settlement``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from cluster import commands, gpu_health, protocol
from cluster.models import Gpu
from cluster.settlement import (
    DOOMED,
    classify_exit,
    held_elsewhere,
    outcome_after,
    record_measures,
    settle,
    stop_other_nodes,
)
from scheduler import announce, transitions, triggers
from scheduler.models import ACTIVE_STATES, Attempt, AttemptLog, AttemptState, Job, JobState

log = logging.getLogger(__name__)

#: What an attempt ended by its agent's shutdown says on its job's timeline (docs/agent.md, --kill-jobs-on-exit).
AGENT_STOP_MESSAGE = "its node agent was shut down and stopped it"


def _locked_current(job_id: int, attempt: int, node: str) -> tuple[Job, Attempt] | None:
    """The locked job and its attempt if ``attempt`` is current and holds GPUs on ``node``."""
    job = Job.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.attempt_count != attempt or job.state not in ACTIVE_STATES:
        return None
    att = Attempt.objects.select_for_update().filter(job=job, number=attempt).first()
    if att is None or node not in (att.gpu_allocation or {}):
        return None
    if not Gpu.objects.filter(node__name=node, index__in=att.gpu_allocation[node], allocated_to=job).exists():
        return None
    return job, att


def _stop_stale(node: str, job_id: int, attempt: int, why: str) -> None:
    log.warning("job %s attempt %d on %s is not current (%s); stopping it", job_id, attempt, node, why)
    transaction.on_commit(lambda: commands.kill(node, job_id, attempt, 0.0, protocol.EXIT_STALE))


def attempt_started(node: str, job_id: int, attempt: int, pid: int | None, started_at: datetime) -> bool:
    """STARTING -> RUNNING for the current attempt (the attempt's start is the agent's time).

    A report for an attempt that is not current stops that process. Returns
    True when the report was about the current attempt.
    """
    with transaction.atomic():
        found = _locked_current(job_id, attempt, node)
        if found is None:
            _stop_stale(node, job_id, attempt, "started report")
            return False
        job, att = found
        gpu_health.launch_succeeded(node, att.gpu_allocation[node])
        if att.state == AttemptState.STARTING:
            Attempt.objects.filter(pk=att.pk, state=AttemptState.STARTING).update(
                state=AttemptState.RUNNING, pid=pid, started_at=started_at
            )
        if job.state == JobState.STARTING:
            transitions.move_locked(job, JobState.RUNNING, "Started", _started_message(att, node, pid),
                                    started_at=started_at)
        else:
            announce.job_changed(job.pk)  # only the attempt changed: no JobEvent announces it
    return True


def _started_message(att: Attempt, node: str, pid: int | None) -> str:
    """The ``Started`` event's text: the node that reported first, and for a job spread over several
    nodes all of them (the job runs once its first node started it; the others follow)."""
    nodes = sorted(att.gpu_allocation or {})
    if len(nodes) < 2:
        return f"running on {node} (pid {pid})"
    return f"running on {', '.join(nodes)} ({node} first, pid {pid})"


def attempt_exited(
    node: str,
    job_id: int,
    attempt: int,
    *,
    exit_code: int | None,
    signal: int | None,
    ended_at: datetime,
    notice_at: datetime | None,
    checkpointed: bool,
    reason: str | None,
    now: datetime,
    checkpoint_marker: bool | None = None,
    message: str = "",
    peak_mem_bytes: int | None = None,
    cpu_seconds: float | None = None,
) -> str | None:
    """Free the attempt's GPUs on ``node``; when its last node is done, settle attempt and job.

    Returns the attempt's outcome, or None when the report was not about a
    current attempt holding GPUs on ``node`` (late or repeated: ignored).
    """
    with transaction.atomic():
        found = _locked_current(job_id, attempt, node)
        if found is None:
            log.info("exit of job %s attempt %d on %s ignored: not a current attempt holding GPUs there",
                     job_id, attempt, node)
            return None
        job, att = found
        Gpu.objects.filter(node__name=node, index__in=att.gpu_allocation[node], allocated_to=job).update(allocated_to=None)
        if reason == protocol.EXIT_LAUNCH_FAILED:  # after freeing them: a GPU marked now has no job to requeue
            gpu_health.launch_failed(node, att.gpu_allocation[node], now)
        outcome = outcome_after(att, classify_exit(reason, exit_code))
        if reason == protocol.EXIT_AGENT_STOP and not message:  # said here, so older agents' reports read so too
            message = AGENT_STOP_MESSAGE
        decided = outcome != att.state
        if decided:
            att.state = outcome
            att.exit_code, att.signal = exit_code, signal
        record_measures(att, node, message, peak_mem_bytes, cpu_seconds)
        if notice_at is not None:
            att.notice_at = notice_at  # the agent's SIGTERM time is more exact than the decision's
        att.ended_at = max(att.ended_at, ended_at) if att.ended_at else ended_at
        if att.notice_at is not None:
            att.vacated_at = att.ended_at
            att.checkpointed = checkpointed if att.checkpointed is None else (att.checkpointed and checkpointed)
            if checkpoint_marker is not None:  # one node that saw the marker written is enough
                att.checkpoint_marker = bool(att.checkpoint_marker) or checkpoint_marker
        if held_elsewhere(job, att):
            att.save()
            announce.job_changed(job.pk)
            if decided and att.state in DOOMED and job.state in (JobState.STARTING, JobState.RUNNING):
                stop_other_nodes(job, att, except_node=node, grace=float(job.grace_period))
            return att.state
        settle(job, att, now)
        transaction.on_commit(triggers.request_scheduling)
        return att.state


def append_log(job_id: int, attempt: int, lines: Sequence[str], now: datetime, node: str | None = None) -> bool:
    """Append streamed log lines to the attempt's stored log; False for an unknown attempt, or one
    that never ran on ``node`` when the report names one (an agent writes only its own jobs' logs).
    An attempt on several nodes has each line labelled with the node that sent it (``[node] ``, as
    ``srun --label`` does), since its nodes' lines interleave in the one log."""
    found = Attempt.objects.filter(job_id=job_id, number=attempt).values_list("pk", "gpu_allocation").first()
    if found is None or (node is not None and node not in (found[1] or {})):
        log.warning("log lines for job %s attempt %d from node %s dropped: no such attempt there",
                    job_id, attempt, node)
        return False
    attempt_pk = found[0]
    if node is not None and len(found[1]) > 1:
        lines = [f"[{node}] {line}" for line in lines]
    # PostgreSQL text cannot hold NUL characters.
    AttemptLog.objects.create(attempt_id=attempt_pk, received_at=now, text="\n".join(lines).replace("\x00", ""))
    return True

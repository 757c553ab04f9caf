"""How an attempt ends: its outcome from the agents' exit reports, its ledger, and the job's next state.

Attempt outcome (from the exit report's ``reason``, see cluster/protocol.py):

===============================  ==============  =========================================
reason                           attempt         job
===============================  ==============  =========================================
None (exited by itself)          COMPLETED/FAIL  COMPLETED if exit code 0, else FAILED
preempt                          PREEMPTED       PENDING (next attempt), CANCELLED if cancelling
preempt, notice for reconfigure  RECONFIGURED    PENDING, target pinned; CANCELLED if cancelling
cancel                           CANCELLED       CANCELLED (event reason IDLE_RECLAIMED after idle reclaim)
timeout                          TIMEOUT         TIMEOUT
launch-failed                    FAILED          FAILED
out-of-memory                    OUT_OF_MEMORY   FAILED (event reason OutOfMemory)
image-unavailable                IMAGE_UNAVAIL.  PENDING (ImageUnavailable), the node excluded for the job
stale, lost, agent-stop, other   NODE_LOST       NODE_LOST -> PENDING, CANCELLED if cancelling
===============================  ==============  =========================================

An attempt on several nodes ends when its last node has reported or when one
of its nodes is lost. Its outcome is that of the first report, except that a
rank exiting 0 only completes the attempt if every other rank does too: a
later report of any other outcome replaces it (``outcome_after``). A failed
or lost rank stops the others. GPUs are freed per node as each node reports.
Progress and lost work follow ``scheduler.accounting``. The exit report's
``message``, ``peak_mem_bytes`` and ``cpu_seconds`` are kept on the attempt
(``record_measures``: the largest node's peak, CPU time summed over nodes).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from cluster import commands, protocol
from cluster.models import Gpu
from scheduler import images, transitions
from scheduler.accounting import attempt_work_seconds, lost_gpu_seconds
from scheduler.models import MESSAGE_LENGTH, OPEN_ATTEMPT_STATES, Attempt, AttemptState, Job, JobState, NoticeReason, PendingReason


def classify_exit(reason: str | None, exit_code: int | None) -> str:
    """The attempt outcome (an ``AttemptState``) of one exit report; see the module table."""
    if reason is None:
        return AttemptState.COMPLETED if exit_code == 0 else AttemptState.FAILED
    return {
        protocol.EXIT_PREEMPT: AttemptState.PREEMPTED,
        protocol.EXIT_CANCEL: AttemptState.CANCELLED,
        protocol.EXIT_TIMEOUT: AttemptState.TIMEOUT,
        protocol.EXIT_LAUNCH_FAILED: AttemptState.FAILED,
        protocol.EXIT_OUT_OF_MEMORY: AttemptState.OUT_OF_MEMORY,
        protocol.EXIT_IMAGE_UNAVAILABLE: AttemptState.IMAGE_UNAVAILABLE,
    }.get(reason, AttemptState.NODE_LOST)


TERMINAL_JOB_STATE = {
    AttemptState.COMPLETED: JobState.COMPLETED,
    AttemptState.FAILED: JobState.FAILED,
    AttemptState.TIMEOUT: JobState.TIMEOUT,
    AttemptState.CANCELLED: JobState.CANCELLED,
    AttemptState.OUT_OF_MEMORY: JobState.FAILED,
}
#: The job event's reason for a terminal outcome whose title-cased name would not read well.
_EVENT_REASON = {AttemptState.OUT_OF_MEMORY: "OutOfMemory"}
#: Outcomes of one rank that doom the whole attempt: the other ranks are stopped.
DOOMED = frozenset({AttemptState.FAILED, AttemptState.NODE_LOST, AttemptState.OUT_OF_MEMORY,
                    AttemptState.IMAGE_UNAVAILABLE})


def record_measures(att: Attempt, node: str, message: str, peak_mem_bytes: int | None,
                    cpu_seconds: float | None) -> None:
    """Add one node's exit measures to the attempt: the largest peak, the summed CPU time, the first message."""
    if peak_mem_bytes is not None:
        att.peak_mem_bytes = max(att.peak_mem_bytes or 0, peak_mem_bytes)
    if cpu_seconds is not None:
        att.cpu_seconds = (att.cpu_seconds or 0.0) + cpu_seconds
    if message and not att.message:
        att.message = f"{node}: {message}"[:MESSAGE_LENGTH]


def outcome_after(att: Attempt, reported: str) -> str:
    """The attempt's outcome once one more of its nodes reported ``reported``.

    The first report decides, except over a completion: a rank that exited 0
    while another rank then fails, is preempted or is lost did not complete
    the job. A reconfiguration notice turns PREEMPTED into RECONFIGURED, which
    is counted apart from preemptions.
    """
    if reported == AttemptState.PREEMPTED and att.notice_reason == NoticeReason.RECONFIGURE:
        reported = AttemptState.RECONFIGURED
    if att.state in OPEN_ATTEMPT_STATES or att.state == AttemptState.COMPLETED:
        return reported
    return att.state


def held_elsewhere(job: Job, att: Attempt) -> bool:
    return held_query(job, att).exists()


def held_query(job: Job, att: Attempt):  # noqa: ANN202 - a GPU queryset
    where = Q(pk__in=[])
    for name, indices in (att.gpu_allocation or {}).items():
        where |= Q(node__name=name, index__in=indices)
    return Gpu.objects.filter(where, allocated_to=job)


def stop_other_nodes(job: Job, att: Attempt, except_node: str, grace: float) -> None:
    nodes = set(held_query(job, att).exclude(node__name=except_node).values_list("node__name", flat=True))
    for name in sorted(nodes):
        transaction.on_commit(
            lambda name=name: commands.kill(name, job.pk, att.number, grace, protocol.EXIT_STALE)
        )


def settle(job: Job, att: Attempt, now: datetime) -> None:
    """The attempt has vacated every GPU: record its ledger and move the job on."""
    work = attempt_work_seconds(att.started_at, att.notice_at or att.ended_at or now, att.number,
                                settings.SCHEDULER_RESUME_OVERHEAD)
    kept = att.state == AttemptState.COMPLETED or bool(att.checkpointed)
    if att.state in (AttemptState.PREEMPTED, AttemptState.RECONFIGURED, AttemptState.NODE_LOST):
        att.lost_gpu_seconds = lost_gpu_seconds(work, att.gpu_count, kept)
    att.ended_at = att.ended_at or now
    att.save()
    progress = job.progress_seconds + (work if kept else 0.0)
    outcome = att.state
    where = ", ".join(att.node_names)
    if outcome in TERMINAL_JOB_STATE:
        reason = _EVENT_REASON.get(outcome, outcome.title())
        if outcome == AttemptState.CANCELLED and att.notice_reason == NoticeReason.IDLE:
            reason = "IDLE_RECLAIMED"  # the kill of idle reclaim (scheduler/reclaim_idle.py), not a user's cancel
        transitions.move_locked(job, TERMINAL_JOB_STATE[outcome], reason, _exit_text(att, where),
              ended_at=att.ended_at, exit_code=att.exit_code, progress_seconds=progress)
    elif job.state == JobState.CANCELLING:
        idle = att.notice_reason == NoticeReason.IDLE  # ended by idle reclaim, not by a user
        transitions.move_locked(job, JobState.CANCELLED, "IDLE_RECLAIMED" if idle else "Cancelled",
                                f"{'ended for idleness' if idle else 'stopped'} on {where}", ended_at=att.ended_at,
                                exit_code=att.exit_code, progress_seconds=progress)
    elif outcome == AttemptState.PREEMPTED:
        kept_text = _kept_text(att)
        message = f"attempt {att.number} vacated {where}; {kept_text}"
        transitions.move_locked(job, JobState.PENDING, PendingReason.PREEMPTED, message, progress_seconds=progress,
              pending_reason=PendingReason.PREEMPTED, pending_message=message)
    elif outcome == AttemptState.RECONFIGURED:
        kept_text = _kept_text(att)
        target = f"{job.target_plan} on {job.target_gpus} GPU{'s' if job.target_gpus != 1 else ''}"
        message = f"attempt {att.number} vacated {where}; {kept_text}; relaunching with {target}"
        transitions.move_locked(job, JobState.PENDING, PendingReason.RECONFIGURED, message, progress_seconds=progress,
              pending_reason=PendingReason.RECONFIGURED, pending_message=message)
    elif outcome == AttemptState.IMAGE_UNAVAILABLE:
        excluded = sorted(set(job.excluded_nodes or []) | set(att.node_names))
        image = job.image.name if job.image_id else ""
        message = images.unavailable_message(image, att.node_names, att.message)[:MESSAGE_LENGTH]
        transitions.move_locked(job, JobState.PENDING, PendingReason.IMAGE_UNAVAILABLE, message,
                                progress_seconds=progress, pending_reason=PendingReason.IMAGE_UNAVAILABLE,
                                pending_message=message, excluded_nodes=excluded)
    else:
        # Why, when a node said so (an agent shut down with its jobs), and what was kept when the job had
        # its notice; a node that went silent says neither.
        why = f" ({att.message})" if att.message else ""
        kept_text = f"; {_kept_text(att)}" if att.notice_at is not None else ""
        message = f"attempt {att.number} lost on {where}{why}{kept_text}"[:MESSAGE_LENGTH]
        transitions.move_locked(job, JobState.NODE_LOST, PendingReason.NODE_LOST, message, progress_seconds=progress)
        transitions.move_locked(job, JobState.PENDING, PendingReason.NODE_LOST, "requeued", pending_reason=PendingReason.NODE_LOST,
              pending_message=message)


def _exit_text(att: Attempt, where: str) -> str:
    if att.state == AttemptState.OUT_OF_MEMORY:
        return f"attempt {att.number} on {where} went past its memory limit and was killed (out of memory)"
    if att.signal is not None:
        return f"attempt {att.number} on {where} ended by signal {att.signal}"
    return f"attempt {att.number} on {where} exited with code {att.exit_code}"


def _kept_text(att: Attempt) -> str:
    """What a stopped attempt kept, as its timeline says it: a job that only exited within its grace
    counts as checkpointed (docs/agent.md) but is not said to have written a checkpoint."""
    if not att.checkpointed:
        return "no checkpoint: work since the last one is lost"
    if att.checkpoint_marker is False:
        return "exited within its grace without writing the checkpoint marker (counted as checkpointed)"
    return "checkpoint written"

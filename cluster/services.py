"""Agent events: what the server does with each REPORT_* from a node agent, and node loss.

Every function here runs in its own transaction, locks the job row it
changes (``select_for_update``), checks that the report is about the job's
*current* attempt on a node where that attempt still holds GPUs, and only then
writes; a late, repeated or stale report changes nothing (a stale process is
told to stop instead). Agent commands and scheduling requests are sent only
after commit.

Attempt outcome (from the exit report's ``reason``, see cluster/protocol.py):

===============================  ==============  =========================================
reason                           attempt         job
===============================  ==============  =========================================
None (exited by itself)          COMPLETED/FAIL  COMPLETED if exit code 0, else FAILED
preempt                          PREEMPTED       PENDING (next attempt), CANCELLED if cancelling
preempt, notice for reconfigure  RECONFIGURED    PENDING, target pinned; CANCELLED if cancelling
cancel                           CANCELLED       CANCELLED
timeout                          TIMEOUT         TIMEOUT
launch-failed                    FAILED          FAILED
stale, lost, agent-stop, other   NODE_LOST       NODE_LOST -> PENDING, CANCELLED if cancelling
===============================  ==============  =========================================

An attempt on several nodes ends when its last node has reported or when one
of its nodes is lost. Its outcome is that of the first report, except that a
rank exiting 0 only completes the attempt if every other rank does too: a
later report of any other outcome replaces it (``_outcome_after``). A failed
or lost rank stops the others. GPUs are freed per node as each node reports.
Progress and lost work follow ``scheduler.accounting``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from cluster import auth, commands, protocol
from cluster.models import Gpu, Node, NodeState
from cluster.selectors import expected_attempts
from portal import realtime
from scheduler import elastic
from scheduler.accounting import attempt_work_seconds, lost_gpu_seconds
from scheduler.models import (
    ACTIVE_STATES,
    OPEN_ATTEMPT_STATES,
    Attempt,
    AttemptLog,
    AttemptState,
    Job,
    JobEvent,
    JobState,
    NoticeReason,
    PendingReason,
)
from scheduler.triggers import request_scheduling

log = logging.getLogger(__name__)

MESSAGE_LENGTH = 500


class AgentAuthError(Exception):
    """A report did not carry the configured agent token."""


def check_token(node: str, token: object) -> None:
    """Raise AgentAuthError unless ``token`` is the token of ``node`` (see cluster/auth.py:
    the node's own token when AGENT_SECRET is set, else AGENT_TOKEN; no check when neither is)."""
    if not auth.token_matches(node, token):
        raise AgentAuthError(f"report from node {node!r} refused: wrong or missing agent token")


# --- outcome rules ----------------------------------------------------------------


def classify_exit(reason: str | None, exit_code: int | None) -> str:
    """The attempt outcome (an ``AttemptState``) of one exit report; see the module table."""
    if reason is None:
        return AttemptState.COMPLETED if exit_code == 0 else AttemptState.FAILED
    return {
        protocol.EXIT_PREEMPT: AttemptState.PREEMPTED,
        protocol.EXIT_CANCEL: AttemptState.CANCELLED,
        protocol.EXIT_TIMEOUT: AttemptState.TIMEOUT,
        protocol.EXIT_LAUNCH_FAILED: AttemptState.FAILED,
    }.get(reason, AttemptState.NODE_LOST)


_TERMINAL_JOB_STATE = {
    AttemptState.COMPLETED: JobState.COMPLETED,
    AttemptState.FAILED: JobState.FAILED,
    AttemptState.TIMEOUT: JobState.TIMEOUT,
    AttemptState.CANCELLED: JobState.CANCELLED,
}


# --- registration and heartbeats ----------------------------------------------------


def register_node(
    name: str, *, gpus: int, cpus: float, mem_gb: float, gpu_models: Sequence[str], agent_version: str, now: datetime,
    address: str = "",
) -> Node:
    """Create or update the node and its GPU rows; a node that was lost is UP again.

    ``address`` is where other nodes reach this one (validated by the caller,
    ``protocol.check_address``); an agent that sends none is reached by its name.

    The agent is then told to keep exactly the attempts the database has on
    the node (AGENT_RECONCILE): after a restart or a loss, anything else it
    still runs is stale and is stopped.
    """
    with transaction.atomic():
        node, created = Node.objects.select_for_update().get_or_create(
            name=name, defaults={"gpus": gpus, "cpus": cpus, "mem_gb": mem_gb, "registered_at": now}
        )
        came_back = node.state == NodeState.NODE_LOST
        node.gpus, node.cpus, node.mem_gb = gpus, cpus, mem_gb
        node.agent_version = agent_version[:64]
        node.address = address or name
        node.last_heartbeat = now
        if came_back:
            node.state = NodeState.UP
        node.save()
        _sync_gpus(node, gpu_models)
        transaction.on_commit(lambda: commands.reconcile(name, expected_attempts(name)))
        transaction.on_commit(request_scheduling)
    log.info("node %s registered (%s): %d GPUs%s", name, "new" if created else "known", gpus,
             ", back from NODE_LOST" if came_back else "")
    return node


def _sync_gpus(node: Node, gpu_models: Sequence[str]) -> None:
    """GPU rows 0..gpus-1 exist with their model names; free rows beyond the count go."""
    existing = {g.index: g for g in node.devices.all()}
    for index in range(node.gpus):
        model = gpu_models[index] if index < len(gpu_models) else ""
        gpu = existing.get(index)
        if gpu is None:
            Gpu.objects.create(node=node, index=index, model_name=model[:100])
        elif gpu.model_name != model[:100]:
            Gpu.objects.filter(pk=gpu.pk).update(model_name=model[:100])
    # A GPU still held stays until its attempt vacates; the snapshot ignores indices >= gpus.
    Gpu.objects.filter(node=node, index__gte=node.gpus, allocated_to__isnull=True).delete()


def heartbeat(name: str, running: Iterable[tuple[int, int]], now: datetime) -> list[tuple[int, int]]:
    """Record that ``name`` is alive and compare what its agent runs with what the database expects.

    * An attempt the agent runs that the database does not expect there is
      stale: the agent is told to stop it (AGENT_KILL reason stale).
    * An attempt the database expects there that the agent's heartbeats have
      not listed for longer than ``unseen_limit()`` is gone (the agent lost it,
      or never got its launch): it ends as if the agent had reported it lost,
      so its job is requeued (or, if it was being cancelled, cancelled).
      Waiting that long, rather than acting on one heartbeat, leaves time for
      an exit report handled in parallel by another worker.
    * A node marked NODE_LOST that heartbeats again is UP again and reconciled.

    Returns the stale ``(job_id, attempt)`` told to stop.
    """
    running = set(running)
    with transaction.atomic():
        if Node.objects.filter(name=name).update(last_heartbeat=now) != 1:
            log.warning("heartbeat from unknown node %r ignored (it registers when its agent starts)", name)
            return []
        came_back = Node.objects.filter(name=name, state=NodeState.NODE_LOST).update(state=NodeState.UP) == 1
        expected = expected_attempts(name)
        gone = _track_unseen(name, expected, running, now)
        stale = sorted(running - expected)
        for job_id, attempt in stale:
            log.warning("node %s runs job %s attempt %d, which is not current there; stopping it", name, job_id, attempt)
            transaction.on_commit(
                lambda job_id=job_id, attempt=attempt: commands.kill(name, job_id, attempt, 0.0, protocol.EXIT_STALE)
            )
        if came_back:
            log.info("node %s is back from NODE_LOST", name)
            realtime.publish_cluster_changed()
            transaction.on_commit(lambda: commands.reconcile(name, expected_attempts(name)))
            transaction.on_commit(request_scheduling)
    for job_id, attempt in gone:
        log.warning("node %s has not listed job %s attempt %d for over %s; ending it as lost",
                    name, job_id, attempt, unseen_limit())
        attempt_exited(name, job_id, attempt, exit_code=None, signal=None, ended_at=now, notice_at=None,
                       checkpointed=False, reason=protocol.EXIT_LOST, now=now)
    return stale


def unseen_limit() -> timedelta:
    """How long a node's heartbeats may leave out an attempt it should run: twice the node-lost delay."""
    return 2 * lost_after()


def _track_unseen(
    name: str, expected: set[tuple[int, int]], running: set[tuple[int, int]], now: datetime
) -> list[tuple[int, int]]:
    """Update ``Attempt.unseen_since[name]`` for the attempts expected on ``name``; return those
    unseen for longer than ``unseen_limit()``.

    Only heartbeats write this field, so a plain read-modify-write is enough:
    a lost update between two heartbeats of one multi-node attempt delays the
    verdict by one heartbeat at most.
    """
    if not expected:
        return []
    where = Q(pk__in=[])
    for job_id, attempt in expected:
        where |= Q(job_id=job_id, number=attempt)
    stamp = now.timestamp()
    limit = unseen_limit().total_seconds()
    gone = []
    for pk, job_id, number, marks in Attempt.objects.filter(where).values_list("pk", "job_id", "number", "unseen_since"):
        marks = dict(marks or {})
        if (job_id, number) in running:
            if name not in marks:
                continue
            del marks[name]
        elif name not in marks:
            marks[name] = stamp
        else:
            if stamp - marks[name] > limit:
                gone.append((job_id, number))
            continue
        Attempt.objects.filter(pk=pk).update(unseen_since=marks)
    return sorted(gone)


# --- attempt reports ------------------------------------------------------------------


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
        if att.state == AttemptState.STARTING:
            Attempt.objects.filter(pk=att.pk, state=AttemptState.STARTING).update(
                state=AttemptState.RUNNING, pid=pid, started_at=started_at
            )
        if job.state == JobState.STARTING:
            _move(job, JobState.RUNNING, "Started", f"running on {node} (pid {pid})", started_at=started_at)
        else:
            realtime.publish_job_changed(job.pk)  # only the attempt changed: no JobEvent announces it
    return True


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
        outcome = _outcome_after(att, classify_exit(reason, exit_code))
        decided = outcome != att.state
        if decided:
            att.state = outcome
            att.exit_code, att.signal = exit_code, signal
        if notice_at is not None:
            att.notice_at = notice_at  # the agent's SIGTERM time is more exact than the decision's
        att.ended_at = max(att.ended_at, ended_at) if att.ended_at else ended_at
        if att.notice_at is not None:
            att.vacated_at = att.ended_at
            att.checkpointed = checkpointed if att.checkpointed is None else (att.checkpointed and checkpointed)
        if _held_elsewhere(job, att):
            att.save()
            realtime.publish_job_changed(job.pk)
            doomed = att.state in (AttemptState.FAILED, AttemptState.NODE_LOST)
            if decided and doomed and job.state in (JobState.STARTING, JobState.RUNNING):
                _stop_other_nodes(job, att, except_node=node, grace=float(job.grace_period))
            return att.state
        _settle(job, att, now)
        transaction.on_commit(request_scheduling)
        return att.state


def append_log(job_id: int, attempt: int, lines: Sequence[str], now: datetime, node: str | None = None) -> bool:
    """Append streamed log lines to the attempt's stored log; False for an unknown attempt, or one
    that never ran on ``node`` when the report names one (an agent writes only its own jobs' logs)."""
    found = Attempt.objects.filter(job_id=job_id, number=attempt).values_list("pk", "gpu_allocation").first()
    if found is None or (node is not None and node not in (found[1] or {})):
        log.warning("log lines for job %s attempt %d from node %s dropped: no such attempt there",
                    job_id, attempt, node)
        return False
    attempt_pk = found[0]
    # PostgreSQL text cannot hold NUL characters.
    AttemptLog.objects.create(attempt_id=attempt_pk, received_at=now, text="\n".join(lines).replace("\x00", ""))
    return True


# --- settling an attempt ----------------------------------------------------------------


def _outcome_after(att: Attempt, reported: str) -> str:
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


def _held_elsewhere(job: Job, att: Attempt) -> bool:
    return _held_query(job, att).exists()


def _held_query(job: Job, att: Attempt):  # noqa: ANN202 - a GPU queryset
    where = Q(pk__in=[])
    for name, indices in (att.gpu_allocation or {}).items():
        where |= Q(node__name=name, index__in=indices)
    return Gpu.objects.filter(where, allocated_to=job)


def _stop_other_nodes(job: Job, att: Attempt, except_node: str, grace: float) -> None:
    nodes = set(_held_query(job, att).exclude(node__name=except_node).values_list("node__name", flat=True))
    for name in sorted(nodes):
        transaction.on_commit(
            lambda name=name: commands.kill(name, job.pk, att.number, grace, protocol.EXIT_STALE)
        )


def _move(job: Job, to: str, reason: str, message: str, **fields: object) -> None:
    """Conditional state change of a locked job with its event; the lock makes it succeed.

    The event is stamped now, under the row lock, so a job's events are in
    the order of the writes even when a report waited for the lock.
    """
    changed = Job.objects.filter(pk=job.pk, state=job.state, attempt_count=job.attempt_count).update(state=to, **fields)
    if changed != 1:
        raise RuntimeError(f"job {job.pk} changed under its row lock")
    JobEvent.objects.create(job=job, at=timezone.now(), from_state=job.state, to_state=to, reason=reason,
                            message=message[:MESSAGE_LENGTH])
    job.state = to


def _settle(job: Job, att: Attempt, now: datetime) -> None:
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
    if outcome in _TERMINAL_JOB_STATE:
        _move(job, _TERMINAL_JOB_STATE[outcome], outcome.title(), _exit_text(att, where),
              ended_at=att.ended_at, exit_code=att.exit_code, progress_seconds=progress)
    elif job.state == JobState.CANCELLING:
        _move(job, JobState.CANCELLED, "Cancelled", f"stopped on {where}", ended_at=att.ended_at,
              exit_code=att.exit_code, progress_seconds=progress)
    elif outcome == AttemptState.PREEMPTED:
        kept_text = "checkpoint written" if att.checkpointed else "no checkpoint: work since the last one is lost"
        message = f"attempt {att.number} vacated {where}; {kept_text}"
        _move(job, JobState.PENDING, PendingReason.PREEMPTED, message, progress_seconds=progress,
              pending_reason=PendingReason.PREEMPTED, pending_message=message)
    elif outcome == AttemptState.RECONFIGURED:
        kept_text = "checkpoint written" if att.checkpointed else "no checkpoint: work since the last one is lost"
        target = f"{job.target_plan} on {job.target_gpus} GPU{'s' if job.target_gpus != 1 else ''}"
        message = f"attempt {att.number} vacated {where}; {kept_text}; relaunching with {target}"
        _move(job, JobState.PENDING, PendingReason.RECONFIGURED, message, progress_seconds=progress,
              pending_reason=PendingReason.RECONFIGURED, pending_message=message)
    else:
        message = f"attempt {att.number} lost on {where}"
        _move(job, JobState.NODE_LOST, PendingReason.NODE_LOST, message, progress_seconds=progress)
        _move(job, JobState.PENDING, PendingReason.NODE_LOST, "requeued", pending_reason=PendingReason.NODE_LOST,
              pending_message=message)


def _exit_text(att: Attempt, where: str) -> str:
    if att.signal is not None:
        return f"attempt {att.number} on {where} ended by signal {att.signal}"
    return f"attempt {att.number} on {where} exited with code {att.exit_code}"


# --- node loss and the periodic tick --------------------------------------------------


def lost_after() -> timedelta:
    """Silence after which an agent's node is NODE_LOST."""
    return timedelta(seconds=settings.AGENT_HEARTBEAT_SECONDS * settings.NODE_LOST_HEARTBEATS)


def detect_lost_nodes(now: datetime) -> list[str]:
    """Mark nodes silent for too long NODE_LOST, end their attempts and requeue their jobs."""
    cutoff = now - lost_after()
    silent = Node.objects.filter(state__in=[NodeState.UP, NodeState.DRAINING]).filter(
        Q(last_heartbeat__lt=cutoff) | Q(last_heartbeat__isnull=True, registered_at__lt=cutoff)
    )
    lost = []
    for node in silent:
        with transaction.atomic():
            # Conditional on the heartbeat read: one that arrived meanwhile keeps the node.
            if Node.objects.filter(pk=node.pk, state=node.state, last_heartbeat=node.last_heartbeat).update(
                state=NodeState.NODE_LOST
            ) != 1:
                continue
            realtime.publish_cluster_changed()
            job_ids = set(Gpu.objects.filter(node=node, allocated_to__isnull=False).values_list("allocated_to", flat=True))
            for job_id in sorted(job_ids):
                _lose_attempt(job_id, node.name, now)
            transaction.on_commit(request_scheduling)
        log.warning("node %s is NODE_LOST (no heartbeat since %s); jobs requeued: %s", node.name,
                    node.last_heartbeat, sorted(job_ids))
        lost.append(node.name)
    return lost


def _lose_attempt(job_id: int, node: str, now: datetime) -> None:
    job = Job.objects.select_for_update().get(pk=job_id)
    att = Attempt.objects.select_for_update().filter(job=job, number=job.attempt_count).first()
    if job.state not in ACTIVE_STATES or att is None or node not in (att.gpu_allocation or {}):
        # GPUs held without a current attempt here: nothing runs for them any more.
        Gpu.objects.filter(node__name=node, allocated_to=job).update(allocated_to=None)
        return
    _stop_other_nodes(job, att, except_node=node, grace=0.0)
    _held_query(job, att).update(allocated_to=None)
    if att.state in OPEN_ATTEMPT_STATES:
        att.state = AttemptState.NODE_LOST
    att.ended_at = att.ended_at or now
    _settle(job, att, now)


def resend_overdue_commands(now: datetime) -> list[tuple[str, int, int]]:
    """Re-send commands whose effect is overdue; agents ignore repeats.

    * a stop (preempt, cancel) whose grace period ended more than the
      node-lost delay ago is re-sent with no grace (SIGKILL);
    * a launch not reported started within the node-lost delay is re-sent.

    Only nodes that are UP get them (a lost node is reconciled when it returns).
    Returns ``(task, job_id, attempt)`` of each command re-sent.
    """
    slack = lost_after()
    up = set(Node.objects.filter(state=NodeState.UP).values_list("name", flat=True))
    resent: list[tuple[str, int, int]] = []
    stopping = Attempt.objects.filter(
        job__state__in=[JobState.PREEMPTING, JobState.CANCELLING],
        number=F("job__attempt_count"),
        notice_at__isnull=False,
    ).select_related("job")
    for att in stopping:
        if att.notice_at + timedelta(seconds=att.job.grace_period) + slack > now:
            continue
        held = set(_held_query(att.job, att).values_list("node__name", flat=True)) & up
        for name in sorted(held):
            if att.job.state == JobState.PREEMPTING:
                commands.preempt(name, att.job_id, att.number, 0.0)
                resent.append((protocol.AGENT_PREEMPT, att.job_id, att.number))
            else:
                commands.kill(name, att.job_id, att.number, 0.0, protocol.EXIT_CANCEL)
                resent.append((protocol.AGENT_KILL, att.job_id, att.number))
    starting = Attempt.objects.filter(
        job__state=JobState.STARTING, state=AttemptState.STARTING, number=F("job__attempt_count"),
        started_at__lt=now - slack,
    ).select_related("job")
    for att in starting:
        allocation = att.gpu_allocation or {}
        plan = elastic.attempt_launch_fields(att.job, att)  # the plan the first launch named
        # The same ranks and master as the first launch: ranks follow the sorted node names.
        for name, cmd in commands.launches_for(att.job, att.number, allocation,
                                               commands.node_addresses(allocation), **plan):
            if name in up:
                commands.launch(name, cmd)
                resent.append((protocol.AGENT_LAUNCH, att.job_id, att.number))
    if resent:
        log.warning("re-sent overdue commands: %s", resent)
    return resent

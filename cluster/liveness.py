"""Node liveness: heartbeats, attempts a node stopped listing, and nodes declared lost.

A node is alive while its agent's heartbeats arrive (every
``AGENT_HEARTBEAT_SECONDS``). A node silent for ``lost_after()`` is NODE_LOST:
its attempts end as lost and their jobs are requeued (``detect_lost_nodes``,
run by the periodic tick, ``cluster.tick``). An attempt a live node's
heartbeats leave out for ``unseen_limit()`` ends the same way.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from cluster import commands, protocol
from cluster.models import Gpu, Node, NodeState
from cluster.reports import attempt_exited
from cluster.selectors import expected_attempts
from cluster.settlement import held_elsewhere, settle, stop_other_nodes
from scheduler import announce, triggers
from scheduler.models import ACTIVE_STATES, OPEN_ATTEMPT_STATES, Attempt, AttemptState, Job, JobState

log = logging.getLogger(__name__)


def lost_after() -> timedelta:
    """Silence after which an agent's node is NODE_LOST."""
    return timedelta(seconds=settings.AGENT_HEARTBEAT_SECONDS * settings.NODE_LOST_HEARTBEATS)


def unseen_limit() -> timedelta:
    """How long a node's heartbeats may leave out an attempt it should run: twice the node-lost delay."""
    return 2 * lost_after()


def heartbeat(name: str, running: Iterable[tuple[int, int]], now: datetime,
              exited: Callable[[], Mapping[tuple[int, int], Mapping[str, Any]]] | None = None) -> list[tuple[int, int]]:
    """Record that ``name`` is alive and compare what its agent runs with what the database expects.

    * An attempt the agent runs that the database does not expect there is
      stale: the agent is told to stop it (AGENT_KILL reason stale).
    * An attempt the database expects there that the agent's heartbeats have
      not listed for longer than ``unseen_limit()`` is gone (the agent lost it,
      or never got its launch): it ends as if the agent had reported it lost,
      so its job is requeued (or, if it was being cancelled, cancelled).
      Waiting that long, rather than acting on one heartbeat, leaves time for
      an exit report handled in parallel by another worker. If the heartbeat
      repeats the attempt's exit (``exited()``, called only then: ``(job_id,
      attempt)`` to ``reports.attempt_exited``'s outcome arguments,
      cluster/agent/recent_exits.py), its exit report was lost or held up: the
      attempt ends as reported instead.
    * A node marked NODE_LOST that heartbeats again is UP again and reconciled.

    Returns the stale ``(job_id, attempt)`` told to stop.
    """
    running = set(running)
    with transaction.atomic():
        if Node.objects.filter(name=name).update(last_heartbeat=now) != 1:
            ask_to_register(name, "heartbeat from unknown node")
            return []
        _unknown_since.pop(name, None)
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
            announce.cluster_changed()
            transaction.on_commit(lambda: commands.reconcile(name, expected_attempts(name)))
            transaction.on_commit(triggers.request_scheduling)
    repeated = exited() if gone and exited is not None else {}
    for job_id, attempt in gone:
        outcome = repeated.get((job_id, attempt))
        if outcome is not None:
            log.warning("node %s has not listed job %s attempt %d for over %s and its exit report has not arrived; "
                        "ending it as its heartbeats report it ended (exit code %s, signal %s)", name, job_id, attempt,
                        unseen_limit(), outcome.get("exit_code"), outcome.get("signal"))
            attempt_exited(name, job_id, attempt, **outcome, now=now)
            continue
        log.warning("node %s has not listed job %s attempt %d for over %s; ending it as lost",
                    name, job_id, attempt, unseen_limit())
        attempt_exited(name, job_id, attempt, exit_code=None, signal=None, ended_at=now, notice_at=None,
                       checkpointed=False, reason=protocol.EXIT_LOST, now=now)
    return stale


#: Seconds between two requests to one unknown node's agent to register again (per worker process).
REGISTER_AGAIN_INTERVAL_S = 30.0
#: Seconds a node stays unknown to this worker process before its agent is asked: an agent's first
#: heartbeat is often handled while its registration is still being stored by another process.
REGISTRATION_IN_FLIGHT_S = 2.0
_asked_to_register: dict[str, float] = {}
_unknown_since: dict[str, float] = {}


def ask_to_register(name: str, why: str) -> None:
    """A heartbeat from a node the database does not know (restored from a backup older than the
    node's registration; the agent registers only when it starts or reconnects to the broker), or
    one naming another database's cluster (an agent that has not yet learned this one's): ask its
    agent to register again once such heartbeats have come for ``REGISTRATION_IN_FLIGHT_S`` (a
    later heartbeat), then at most every ``REGISTER_AGAIN_INTERVAL_S``. The heartbeat's signature was
    checked for that node name, so only its own agent is asked."""
    now = time.monotonic()
    if now - _unknown_since.setdefault(name, now) < REGISTRATION_IN_FLIGHT_S:
        log.debug("%s %r: its registration may be in flight", why, name)
        return
    if now - _asked_to_register.get(name, -math.inf) < REGISTER_AGAIN_INTERVAL_S:
        return
    # The first time is routine after a restore from a backup. Asked again, the agent did not register.
    level = logging.WARNING if name in _asked_to_register else logging.INFO
    _asked_to_register[name] = now
    log.log(level, "%s %r: asking its agent to register again", why, name)
    commands.register_again(name)


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
            announce.cluster_changed()
            job_ids = set(Gpu.objects.filter(node=node, allocated_to__isnull=False).values_list("allocated_to", flat=True))
            for job_id in sorted(job_ids):
                _lose_attempt(job_id, node.name, now)
            transaction.on_commit(triggers.request_scheduling)
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
    # Only the lost node's GPUs are freed now: the ranks on the other nodes are still running and keep
    # theirs until their agents report them stopped, as after a failed rank (``reports``).
    Gpu.objects.filter(node__name=node, index__in=att.gpu_allocation[node], allocated_to=job).update(allocated_to=None)
    if att.state in OPEN_ATTEMPT_STATES:
        att.state = AttemptState.NODE_LOST
    if not att.message:  # the job's timeline names the node that was lost, not only the nodes it ran on
        att.message = f"{node}: no heartbeat for {lost_after().total_seconds():g} s"
    att.ended_at = max(att.ended_at, now) if att.ended_at else now
    if held_elsewhere(job, att):
        att.save()
        if job.state in (JobState.STARTING, JobState.RUNNING):
            # SIGTERM, the job's grace, then SIGKILL: the surviving ranks may checkpoint what they hold.
            # A job already being preempted or cancelled is stopping with its grace (``overdue`` re-sends).
            stop_other_nodes(job, att, except_node=node, grace=float(job.grace_period))
        announce.job_changed(job.pk)
        return
    settle(job, att, now)

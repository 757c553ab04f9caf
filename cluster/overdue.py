"""Commands whose effect is overdue are sent again (the periodic tick, ``cluster.tick``)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db.models import F

from cluster import commands, protocol
from cluster.liveness import lost_after
from cluster.models import Node, NodeState
from cluster.settlement import DOOMED, held_query
from scheduler import confinement, elastic
from scheduler.models import Attempt, AttemptState, JobState

log = logging.getLogger(__name__)


def resend_overdue_commands(now: datetime) -> list[tuple[str, int, int]]:
    """Re-send commands whose effect is overdue; agents ignore repeats.

    * a stop (preempt, cancel) whose grace period ended more than the
      node-lost delay ago is re-sent with no grace (SIGKILL);
    * so is the stop of the ranks still running after another rank of their
      attempt failed or was lost (``settlement.DOOMED``), counted from the
      attempt's end;
    * a launch not reported started within the node-lost delay is re-sent.

    Only nodes that are UP get them (a lost node is reconciled when it returns).
    Returns ``(task, job_id, attempt)`` of each command re-sent.
    """
    slack = lost_after()
    up = set(Node.objects.filter(state=NodeState.UP).values_list("name", flat=True))
    resent = _resend_stops(now, slack, up) + _resend_doomed_stops(now, slack, up) + _resend_launches(now, slack, up)
    if resent:
        log.warning("re-sent overdue commands: %s", resent)
    return resent


def _resend_stops(now: datetime, slack: timedelta, up: set[str]) -> list[tuple[str, int, int]]:
    resent: list[tuple[str, int, int]] = []
    stopping = Attempt.objects.filter(
        job__state__in=[JobState.PREEMPTING, JobState.CANCELLING],
        number=F("job__attempt_count"),
        notice_at__isnull=False,
    ).select_related("job")
    for att in stopping:
        if att.notice_at + timedelta(seconds=att.job.grace_period) + slack > now:
            continue
        held = set(held_query(att.job, att).values_list("node__name", flat=True)) & up
        for name in sorted(held):
            if att.job.state == JobState.PREEMPTING:
                commands.preempt(name, att.job_id, att.number, 0.0)
                resent.append((protocol.AGENT_PREEMPT, att.job_id, att.number))
            else:
                commands.kill(name, att.job_id, att.number, 0.0, protocol.EXIT_CANCEL)
                resent.append((protocol.AGENT_KILL, att.job_id, att.number))
    return resent


def _resend_doomed_stops(now: datetime, slack: timedelta, up: set[str]) -> list[tuple[str, int, int]]:
    """The stop sent to the other ranks when one failed or its node was lost (``stop_other_nodes``),
    again without grace once that grace and the node-lost delay have passed: the attempt is settled
    only when every rank has reported, so a lost command would keep the job running forever."""
    resent: list[tuple[str, int, int]] = []
    doomed = Attempt.objects.filter(
        job__state__in=[JobState.STARTING, JobState.RUNNING],
        number=F("job__attempt_count"),
        state__in=DOOMED,
        ended_at__isnull=False,
    ).select_related("job")
    for att in doomed:
        if att.ended_at + timedelta(seconds=att.job.grace_period) + slack > now:
            continue
        for name in sorted(set(held_query(att.job, att).values_list("node__name", flat=True)) & up):
            commands.kill(name, att.job_id, att.number, 0.0, protocol.EXIT_STALE)
            resent.append((protocol.AGENT_KILL, att.job_id, att.number))
    return resent


def _resend_launches(now: datetime, slack: timedelta, up: set[str]) -> list[tuple[str, int, int]]:
    return _launch_again(_starting().filter(started_at__lt=now - slack), up)


def resend_launches_to(node: str) -> list[tuple[str, int, int]]:
    """Send ``node`` again the launches of every attempt still starting on it, at once: its agent has
    just registered, and a launch it got before may have been lost with its previous run, or refused
    (signed with the token it had before a rotation of the agent secret). Agents ignore a launch of an
    attempt they have already started."""
    return _launch_again(_starting().filter(gpu_allocation__has_key=node), {node})


def _launch_again(starting, nodes: set[str]) -> list[tuple[str, int, int]]:  # noqa: ANN001 - Attempt queryset
    """Send the launch of each of the ``starting`` attempts again to those of its nodes in ``nodes``, with the
    same ranks, master, plan, user, limits and image as the first; ``(task, job_id, attempt)`` of each."""
    resent: list[tuple[str, int, int]] = []
    for att in starting.select_related("job"):
        allocation = att.gpu_allocation or {}
        plan = elastic.attempt_launch_fields(att.job, att)  # the plan the first launch named
        plan.update(confinement.launch_fields([att.job_id])[att.job_id])  # its user, limits and image
        # The same ranks and master as the first launch: ranks follow the sorted node names.
        for name, cmd in commands.launches_for(att.job, att.number, allocation,
                                               commands.node_addresses(allocation), **plan):
            if name in nodes:
                commands.launch(name, cmd)
                resent.append((protocol.AGENT_LAUNCH, att.job_id, att.number))
    return resent


def _starting():  # noqa: ANN202 - an Attempt queryset
    return Attempt.objects.filter(job__state=JobState.STARTING, state=AttemptState.STARTING,
                                  number=F("job__attempt_count"))

"""The periodic safety tick (Celery beat): node-loss detection, the agents' Redis users kept, overdue commands
re-sent, then a cycle.

Nodes are declared lost only if the server could have heard them: after a
gap between two completed ticks longer than the node-lost delay (PostgreSQL
or Redis was down, or no worker ran), heartbeats sent meanwhile were never
recorded, so loss detection waits one more node-lost delay for the agents
to be heard again instead of requeueing every job of live nodes.
"""

from __future__ import annotations

import logging
from datetime import datetime

import redis
from django.utils import timezone

from cluster import broker_users, liveness, overdue
from cluster.models import GpuPolicy
from scheduler import coordination, idleness, loop, triggers
from scheduler.models import Job, JobState

log = logging.getLogger(__name__)

LAST_TICK_KEY = "gpusched:scheduler:last-tick"
DEAF_UNTIL_KEY = "gpusched:scheduler:no-node-loss-until"


def tick() -> dict[str, object]:
    """One tick: lost nodes (when they could have been heard), overdue commands, requested cycles."""
    now = timezone.now()
    client = coordination.redis_client()
    lost = liveness.detect_lost_nodes(now) if _may_declare_nodes_lost(client, now) else []
    restored = broker_users.keep()
    resent = overdue.resend_overdue_commands(now)
    _request_cycle_for_idle_jobs(client, now)
    cycles = loop.run_requested_cycles(client)
    client.set(LAST_TICK_KEY, now.timestamp())
    return {"lost_nodes": lost, "resent": resent, "cycles": cycles, "broker_users_restored": restored}


def _request_cycle_for_idle_jobs(client: redis.Redis, now: datetime) -> None:
    """An idle job changes nothing the loop hears of: a cycle is asked for when a warning or a
    reclaim may be due and some job waits (``scheduler.idleness``)."""
    policy = GpuPolicy.objects.filter(pk=1).values_list("idle_after_s", "idle_grace_s").first()
    if policy and idleness.due(client, now.timestamp(), float(policy[0]), float(policy[1])) \
            and Job.objects.filter(state=JobState.PENDING).exists():
        triggers.request_scheduling()


def _may_declare_nodes_lost(client: redis.Redis, now: datetime) -> bool:
    window = liveness.lost_after().total_seconds()
    last = client.get(LAST_TICK_KEY)
    if last is None or now.timestamp() - float(last) > window:
        client.set(DEAF_UNTIL_KEY, now.timestamp() + window)
        if last is None:  # the loop's first tick (a stop clears the key): routine, not a gap
            log.info("first tick: node-loss detection waits %.0f s for heartbeats", window)
        else:
            log.warning("no completed tick for more than %.0f s: node-loss detection waits %.0f s for heartbeats",
                        window, window)
        return False
    until = client.get(DEAF_UNTIL_KEY)
    return until is None or now.timestamp() >= float(until)

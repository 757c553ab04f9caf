"""The scheduling loop: snapshot, decide, apply; one runner at a time; debounced triggers.

``run_cycle()`` is one cycle with no lock: read the database into a snapshot
(``scheduler.snapshot``), ask the configured policy for decisions, apply them
in one transaction (``scheduler.apply``). Commands reach agents only after
that transaction commits.

``run_requested_cycles()`` is what the Celery tasks call. Every trigger (a
submission, a cancellation, a job exit, the periodic tick) first marks a cycle
as *requested* (a Redis key), then tries the Redis lock without waiting:

* lock taken: the runner that holds it sees the request when its cycle ends
  and runs one more cycle, so a burst of events while a cycle runs costs one
  further cycle, not one per event;
* lock free: this worker runs cycles until no request is left.

A runner re-checks the request after releasing the lock, so a request made
just as the lock is released is not stranded. The lock expires after
``SCHEDULER_LOCK_TIMEOUT`` seconds, so a worker killed mid-cycle blocks the
loop at most that long (and leaves nothing half-applied: see apply.py).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal import metrics
from scheduler import apply, snapshot
from scheduler.core.policy import Policy, make_policy

log = logging.getLogger(__name__)

REQUEST_KEY = "gpusched:scheduler:cycle-requested"
LOCK_KEY = "gpusched:scheduler:cycle-lock"
# Cycles one runner runs back to back before handing over to a fresh task, so
# a steady stream of events cannot pin one worker process forever.
MAX_CYCLES_PER_RUN = 50


@dataclass(frozen=True, slots=True)
class CycleReport:
    """What one cycle did (for logs, tests and the benchmark); ``seconds`` is its wall time."""

    decisions: int
    applied: apply.Applied
    running: int
    pending: int
    seconds: float


@functools.lru_cache(maxsize=8)
def _policy(name: str, resume_overhead: float) -> Policy:
    """The policy by name, built once per process. A policy that estimates preemption
    loss (``resume_overhead``) gets the overhead the accounting charges."""
    try:
        return make_policy(name, resume_overhead=resume_overhead)
    except TypeError:  # this policy has no such parameter
        return make_policy(name)


def current_policy() -> Policy:
    return _policy(settings.SCHEDULER_POLICY, float(settings.SCHEDULER_RESUME_OVERHEAD))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Run a block with Python's cyclic garbage collector paused.

    A cycle at 10,000 jobs makes some 100,000 short-lived, acyclic objects
    (rows, specs, decisions); each allocation burst made the collector walk the
    whole heap again and again, a fifth to a third of the snapshot's time. They
    are freed by reference counting anyway; the collector resumes afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_cycle(policy: Policy | None = None, now: datetime | None = None) -> CycleReport:
    """One scheduling cycle, without the lock (safe anyway: every write is conditional)."""
    started = time.perf_counter()
    now = now or timezone.now()
    policy = policy or current_policy()
    with gc_paused():
        cycle = snapshot.build(now)
        decisions = policy.decide(cycle.snapshot, now.timestamp())
        with transaction.atomic():
            applied = apply.apply_decisions(decisions, cycle)
            applied.cancel_kills = apply.request_cancel_kills(timezone.now())
    seconds = time.perf_counter() - started
    metrics.record_cycle_duration(seconds)  # the /metrics histogram; never raises
    report = CycleReport(len(decisions), applied, len(cycle.snapshot.running), len(cycle.snapshot.pending), seconds)
    if applied.started or applied.preempted or applied.reconfigured or applied.skipped or applied.cancel_kills:
        log.info(
            "cycle: started %s, preempted %s, reconfigured %s, cancel kills %s, skipped %s (%d running, %d pending)",
            applied.started, applied.preempted, applied.reconfigured, applied.cancel_kills, applied.skipped,
            report.running, report.pending,
        )
    return report


@functools.lru_cache(maxsize=4)
def _redis_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)


def redis_client() -> redis.Redis:
    return _redis_for(settings.REDIS_URL)


def run_requested_cycles(client: redis.Redis | None = None) -> int:
    """Mark a cycle as requested and run cycles while requests remain and the lock is ours.

    Returns the number of cycles this call ran (0 when another runner holds the
    lock: that runner will serve the request).
    """
    client = client or redis_client()
    client.set(REQUEST_KEY, "1")
    ran = 0
    while True:
        lock = client.lock(LOCK_KEY, timeout=settings.SCHEDULER_LOCK_TIMEOUT, blocking=False)
        if not lock.acquire(blocking=False):
            return ran
        try:
            while ran < MAX_CYCLES_PER_RUN and client.getdel(REQUEST_KEY):
                run_cycle()
                ran += 1
        finally:
            _release(lock)
        if not client.exists(REQUEST_KEY):
            return ran
        if ran >= MAX_CYCLES_PER_RUN:
            _hand_over()
            return ran


def _release(lock: redis.lock.Lock) -> None:
    try:
        lock.release()
    except redis.exceptions.LockError:
        # The cycle outlived the lock's timeout; another runner may have started.
        log.warning("the scheduling lock expired before the cycle ended; raise SCHEDULER_LOCK_TIMEOUT")


def _hand_over() -> None:
    from scheduler.triggers import request_scheduling

    request_scheduling()


LAST_TICK_KEY = "gpusched:scheduler:last-tick"
DEAF_UNTIL_KEY = "gpusched:scheduler:no-node-loss-until"


def tick() -> dict[str, object]:
    """The periodic safety tick: node-lost detection, overdue commands re-sent, then a cycle.

    Nodes are declared lost only if the server could have heard them: after a
    gap between two completed ticks longer than the node-lost delay (PostgreSQL
    or Redis was down, or no worker ran), heartbeats sent meanwhile were never
    recorded, so loss detection waits one more node-lost delay for the agents
    to be heard again instead of requeueing every job of live nodes.
    """
    from cluster import services

    now = timezone.now()
    client = redis_client()
    lost = services.detect_lost_nodes(now) if _may_declare_nodes_lost(client, now) else []
    resent = services.resend_overdue_commands(now)
    cycles = run_requested_cycles(client)
    client.set(LAST_TICK_KEY, now.timestamp())
    return {"lost_nodes": lost, "resent": resent, "cycles": cycles}


def _may_declare_nodes_lost(client: redis.Redis, now: datetime) -> bool:
    from cluster.services import lost_after

    window = lost_after().total_seconds()
    last = client.get(LAST_TICK_KEY)
    if last is None or now.timestamp() - float(last) > window:
        client.set(DEAF_UNTIL_KEY, now.timestamp() + window)
        log.warning("no completed tick for more than %.0f s: node-loss detection waits %.0f s for heartbeats",
                    window, window)
        return False
    until = client.get(DEAF_UNTIL_KEY)
    return until is None or now.timestamp() >= float(until)

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

from scheduler import apply, cancel_kills, coordination, cycle_metrics, dependencies, reclaim_idle, snapshot
from scheduler import triggers
from scheduler.core import idle_reclaim
from scheduler.core.policy import Policy, make_policy
from scheduler.sim.runner import accepted_params

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
def _policy(name: str, resume_overhead: float, reclaim_min_runtime: float, explain: bool = True) -> Policy:
    """The policy by name, built once per process. A policy that estimates preemption
    loss (``resume_overhead``) gets the overhead the accounting charges; one that
    reclaims GPUs for fair share gets the minimum runtime before a job may be reclaimed
    (it acts only while the snapshot carries tenants: ``SCHEDULER_FAIR_SHARE``).
    ``explain=False``: a policy that writes Pend messages is asked not to (forecasts
    read none)."""
    params: dict[str, object] = {"resume_overhead": resume_overhead, "reclaim_min_runtime": reclaim_min_runtime}
    if not explain:
        params["explain"] = False
    accepted = accepted_params(type(make_policy(name)))
    return make_policy(name, **{k: v for k, v in params.items() if k in accepted})


def current_policy(explain: bool = True) -> Policy:
    """The configured policy (``explain=False``: without Pend messages, for forecasts)."""
    return _policy(settings.SCHEDULER_POLICY, float(settings.SCHEDULER_RESUME_OVERHEAD),
                   float(settings.SCHEDULER_RECLAIM_MIN_RUNTIME), explain)


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
    policy = policy or current_policy()
    # The cycle's instant is taken after the policy is built (a fresh worker's first cycle builds it),
    # right before the snapshot: a GPU freed in between would otherwise be given a start recorded
    # before the end of the job that freed it.
    now = now or timezone.now()
    with gc_paused():
        # The cycle's objects (some 100,000 at 50,000 pending jobs) die as the call returns, while the
        # collector is still paused: alive when it resumed, its first collection walked them all
        # (half a second at 5,000 nodes).
        decided, applied, running, pending = _decide_and_apply(policy, now)
    seconds = time.perf_counter() - started
    cycle_metrics.record_cycle_duration(seconds)  # the /metrics histogram; never raises
    report = CycleReport(decided, applied, running, pending, seconds)
    triggers.request_forecasts()  # the queue may have changed; debounced to twice per FORECAST_INTERVAL_S
    if applied.started or applied.preempted or applied.reconfigured or applied.skipped or applied.cancel_kills:
        log.info(
            "cycle: started %s, preempted %s, reconfigured %s, cancel kills %s, skipped %s (%d running, %d pending)",
            listed(applied.started), listed(applied.preempted), listed(applied.reconfigured),
            listed(applied.cancel_kills), listed(applied.skipped), report.running, report.pending,
        )
    return report


def _decide_and_apply(policy: Policy, now: datetime) -> tuple[int, apply.Applied, int, int]:
    """Snapshot, decide, apply and commit; returns (decisions, what was applied, running, pending)."""
    cycle = snapshot.build(now)
    decisions = policy.decide(cycle.snapshot, now.timestamp())
    idle_actions = idle_reclaim.decide(cycle.snapshot, now.timestamp())
    with transaction.atomic():
        applied = apply.apply_decisions(decisions, cycle)
        if idle_actions:  # after the policy's writes, skipping a job they changed
            reclaim_idle.apply_idle(idle_actions, cycle, now)
        applied.cancel_kills = cancel_kills.request_cancel_kills(timezone.now())
        if cycle.never_satisfied and dependencies.cancel_never_satisfied(cycle.never_satisfied, now):
            transaction.on_commit(triggers.request_scheduling)  # their own dependents are decided next
    return len(decisions), applied, len(cycle.snapshot.running), len(cycle.snapshot.pending)


LOGGED_IDS = 20


def listed(items: list) -> str:
    """A cycle log's list: whole up to ``LOGGED_IDS`` entries, else its first ones and the count
    (a first cycle on a large cluster starts and preempts thousands of jobs: one log line of
    every id was tens of kilobytes)."""
    if len(items) <= LOGGED_IDS:
        return str(items)
    return f"{len(items)}: {str(items[:LOGGED_IDS])[:-1]}, ... {len(items) - LOGGED_IDS} more]"


def run_requested_cycles(client: redis.Redis | None = None) -> int:
    """Mark a cycle as requested and run cycles while requests remain and the lock is ours.

    Returns the number of cycles this call ran (0 when another runner holds the
    lock: that runner will serve the request).
    """
    client = client or coordination.redis_client()
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
    triggers.request_scheduling()

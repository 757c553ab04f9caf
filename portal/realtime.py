"""Live updates for the browser: the one module that talks to the channel layer.

Writers (portal services, the scheduling loop, agent-report services) call the
``publish_*`` functions after a change; WebSocket consumers (``portal.consumers``)
are members of the groups below and push fresh state to the pages.

Groups:

* ``cluster``: the cluster page (GPU grid, queue by class, utilization);
* ``latency``: the latency page (wait and slowdown percentiles, ledger summary);
* ``jobs.<k>``: the job pages of every job whose id is ``k`` modulo
  ``JOB_SHARDS``. A hint names its job ids and each page ignores the others.
  One group per job would cost the writer a channel-layer round trip per
  changed job even when no page follows it (a scheduling cycle that starts,
  preempts or re-reasons thousands of jobs); with shards a cycle sends at most
  ``JOB_SHARDS`` job hints, and a page receives about 1/``JOB_SHARDS`` of them.

Messages are *hints* ("job 7 changed", "attempt 2 of job 7 has new log
lines"), never data: each consumer re-reads the database with its viewer's
permissions and sends what that viewer may see. So a lost, repeated or spurious
hint costs at most one extra read, and nothing secret ever travels through the
channel layer.

Contract of every ``publish_*`` function:

* Safe inside a transaction: the hint is sent by ``transaction.on_commit``, so
  a rolled-back change is never announced and the reader finds the committed
  rows. Outside a transaction it is sent at once.
* Submission hints are throttled per process (``publish_job_submitted``).
* Hints of one transaction are coalesced: starting fifty jobs in one
  scheduling cycle sends one ``cluster`` hint, one ``latency`` hint and one
  ``jobs.changed`` hint per shard those jobs fall in.
* Never raises because of the channel layer: with none configured it does
  nothing; when Redis cannot be reached the failure is logged and, for
  ``PUBLISH_COOLDOWN_S`` seconds, further hints are dropped instead of each
  waiting ``PUBLISH_TIMEOUT_S`` again (the pages resynchronise when their
  socket reconnects).

``connect_signals()`` (called once by the dashboard app) makes every saved
``JobEvent`` publish its job (each state transition) or the new queue entry
(the submission),
every saved ``AttemptLog`` chunk publish its log, and every saved ``Node``
publish the cluster, so callers that write those rows with
``save()``/``create()`` need not call anything. ``bulk_create`` sends
no signals: call the function yourself then.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from django.db import transaction

from portal import cluster_cache

logger = logging.getLogger(__name__)

CLUSTER_GROUP = "cluster"
LATENCY_GROUP = "latency"

#: Consumer handler names (the channel layer maps "job.changed" to ``job_changed``).
CLUSTER_CHANGED = "cluster.changed"
LATENCY_CHANGED = "latency.changed"
JOBS_CHANGED = "jobs.changed"
JOB_LOG = "job.log"
JOB_PROGRESS = "job.progress"

#: Number of job-page groups (``job_group``); a power of two is not required.
JOB_SHARDS = 64

#: Longest a flush may wait for the channel layer, in seconds.
PUBLISH_TIMEOUT_S = 2.0
#: After a failed flush, hints are dropped for this many seconds.
PUBLISH_COOLDOWN_S = 5.0
#: Shortest time between two submission hints of one process (see ``publish_job_submitted``).
SUBMISSION_HINT_INTERVAL_S = 0.25


def job_group(job_id: int) -> str:
    """The group a job's page joins: shared with the pages of the other jobs of its shard."""
    return f"jobs.{int(job_id) % JOB_SHARDS}"


#: Consumer handler of ``publish_access_revoked`` (``access_revoked``).
ACCESS_REVOKED = "access.revoked"


def user_group(user_id: int) -> str:
    """The group of every live page one user has open, whatever page it is."""
    return f"user.{int(user_id)}"


def publish_access_revoked(user_id: int) -> None:
    """Tell every live page of user ``user_id`` that their access was revoked: each closes its
    socket (the consumers also re-check access before each push, for revocations made otherwise)."""
    _queue(user_group(user_id), {"type": ACCESS_REVOKED})


# --- The public API ----------------------------------------------------------


def publish_job_changed(job: Any) -> None:
    """Announce that a job's state, reason, attempts or ledger changed.

    ``job`` is a ``scheduler.models.Job`` or its id. Also refreshes the cluster
    page (queue, GPU grid) and the latency page, which a job change affects.
    """
    publish_jobs_changed([int(getattr(job, "pk", job))])


def publish_jobs_changed(job_ids: Iterable[int]) -> None:
    """Announce that these jobs changed (as :func:`publish_job_changed` for each, in one call)."""
    _changed_job_ids().update(int(j) for j in job_ids)
    _queue(CLUSTER_GROUP, {"type": CLUSTER_CHANGED})
    _queue(LATENCY_GROUP, {"type": LATENCY_CHANGED})


def publish_job_submitted(job: Any) -> None:
    """Announce a new job (its queue entry) to the cluster and latency pages.

    No hint goes to the job's own group: no page can follow a job before the
    transaction creating it commits, and a page opened after reads the job.
    Throttled per process: within ``SUBMISSION_HINT_INTERVAL_S`` of the last
    submission hint of this process, nothing is sent. Nothing is lost by
    that: every submission is followed by a scheduling cycle (requested on
    commit, or the periodic tick), which writes the job's decision (a start
    or a pending reason) and announces that job, which refreshes both pages.
    A burst of submissions thus costs the pages a few re-reads, and the
    writer a few sends, instead of one each.
    """
    global _last_submission_hint
    now = _clock()
    with _cooldown_lock:
        if now - _last_submission_hint < SUBMISSION_HINT_INTERVAL_S:
            return
        _last_submission_hint = now
    _queue(CLUSTER_GROUP, {"type": CLUSTER_CHANGED})
    _queue(LATENCY_GROUP, {"type": LATENCY_CHANGED})


def publish_cluster_changed() -> None:
    """Announce a change of nodes or GPUs that is not a job transition
    (registration, node state, node lost or back, GPU rows)."""
    _queue(CLUSTER_GROUP, {"type": CLUSTER_CHANGED})


def publish_log_lines(job_id: int, attempt: int) -> None:
    """Announce new log lines of attempt number ``attempt`` of job ``job_id``.

    The lines must already be stored (``scheduler.models.AttemptLog``) in the
    current transaction: the job page's consumer reads every chunk it has not
    sent yet, so nothing is lost or shown twice however hints are merged.
    """
    job_id, attempt = int(job_id), int(attempt)
    _queue(job_group(job_id), {"type": JOB_LOG, "job_id": job_id, "attempt": attempt}, key=f"log.{job_id}.{attempt}")


def publish_job_progress(job_id: int) -> None:
    """Announce a new progress report of job ``job_id`` (stored in the current transaction)."""
    job_id = int(job_id)
    _queue(job_group(job_id), {"type": JOB_PROGRESS, "job_id": job_id}, key=f"progress.{job_id}")


def publish_forecasts_changed(job_ids: list[int]) -> None:
    """Announce new start-time forecasts or queue positions of these pending jobs: their job
    pages (one ``jobs.changed`` hint per shard) and the cluster page's queue re-read."""
    _changed_job_ids().update(int(j) for j in job_ids)
    _queue(CLUSTER_GROUP, {"type": CLUSTER_CHANGED})


# --- Coalescing and sending -------------------------------------------------

_local = threading.local()
_cooldown_until = 0.0
_last_submission_hint = float("-inf")
_clock = time.monotonic  # the submission throttle's clock (tests replace it)
_cooldown_lock = threading.Lock()


def _pending() -> dict[tuple[str, str], dict]:
    pending = getattr(_local, "pending", None)
    if pending is None:
        pending = _local.pending = {}
    return pending


def _changed_job_ids() -> set[int]:
    ids = getattr(_local, "changed_job_ids", None)
    if ids is None:
        ids = _local.changed_job_ids = set()
    return ids


def _queue(group: str, message: dict, key: str | None = None) -> None:
    """Remember a hint and make sure a flush runs when the transaction commits.

    Hints queued in a transaction that rolls back stay pending and go out with
    the next commit of this thread: harmless, since a hint only makes a
    consumer re-read.
    """
    _pending()[(group, key or message["type"])] = message
    _flush_on_commit()


def _flush_on_commit() -> None:
    """Register ``flush`` with the current transaction unless it already is.

    One registration per transaction, not one per hint: a cycle announcing
    thousands of jobs would otherwise queue thousands of callbacks. Django
    drops a callback registered inside a savepoint that rolls back, so the
    check looks at what is registered now rather than at a flag of ours.
    """
    connection = transaction.get_connection()
    registered = getattr(_local, "registered", None)
    if (connection.in_atomic_block and registered is not None
            and any(entry[1] is registered for entry in connection.run_on_commit)):
        return

    def flush_once() -> None:  # a fresh callable, so a later transaction's registration is told apart
        flush()

    _local.registered = flush_once
    transaction.on_commit(flush_once)


def flush() -> int:
    """Send every pending hint of this thread now; return how many were sent."""
    _local.registered = None
    pending = _pending()
    changed = _changed_job_ids()
    if not pending and not changed:
        return 0
    items = _job_hints(changed) + [(group, message) for (group, _), message in pending.items()]
    pending.clear()
    changed.clear()
    return _send(items)


def _job_hints(job_ids: set[int]) -> list[tuple[str, dict]]:
    """One ``jobs.changed`` hint per shard, naming that shard's changed jobs."""
    by_group: dict[str, list[int]] = {}
    for job_id in sorted(job_ids):
        by_group.setdefault(job_group(job_id), []).append(job_id)
    return [(group, {"type": JOBS_CHANGED, "job_ids": ids}) for group, ids in by_group.items()]


def _send(items: list[tuple[str, dict]]) -> int:
    global _cooldown_until
    from channels.layers import get_channel_layer

    if time.monotonic() < _cooldown_until:
        return 0
    try:
        layer = get_channel_layer()
    except Exception:  # a misconfigured layer must not break a write path
        logger.exception("channel layer is misconfigured; live updates are off")
        layer = None
    if layer is None:
        return 0
    if any(group == CLUSTER_GROUP for group, _ in items):
        _count_cluster_change()
    try:
        _run_async(_group_send_all, layer, items)
    except Exception as exc:  # Redis down, timeout, loop trouble: the write has committed anyway
        with _cooldown_lock:
            _cooldown_until = time.monotonic() + PUBLISH_COOLDOWN_S
        logger.warning("live update not sent (%s: %s); pausing updates for %.0f s",
                       type(exc).__name__, exc, PUBLISH_COOLDOWN_S)
        return 0
    return len(items)


def _count_cluster_change() -> None:
    """Count the change before its hint goes out, so a page woken by the hint never takes a cluster
    state that other processes read before it (``portal.cluster_cache``)."""
    global _uncounted_logged_at
    try:
        cluster_cache.announce_change()
    except Exception as exc:  # Redis down: the pages cannot take shared states either, and read for themselves
        if time.monotonic() - _uncounted_logged_at > 60:
            _uncounted_logged_at = time.monotonic()
            logger.warning("cluster change not counted (%s: %s)", type(exc).__name__, exc)


_uncounted_logged_at = float("-inf")


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _run_async(fn: Any, *args: Any) -> None:
    """Run coroutine function ``fn`` to completion from sync code.

    Normally through ``async_to_sync``. A thread that already has a running
    event loop (sync code called from a coroutine without ``sync_to_async``,
    or a synchronous API that drives its own loop) cannot do that, so the
    send then happens on a short-lived helper thread with a loop of its own.
    """
    from asgiref.sync import async_to_sync

    if not _loop_running():
        # Not from inside the ``except`` of the check: async_to_sync re-raises the exception being
        # handled in its own frames, and that exception's traceback then held every caller's frame in
        # a reference cycle (a scheduling cycle's whole snapshot, until the collector walked it).
        async_to_sync(fn)(*args)
        return
    outcome: dict[str, BaseException] = {}

    def target() -> None:
        try:
            async_to_sync(fn)(*args)
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc

    helper = threading.Thread(target=target, name="realtime-publish", daemon=True)
    helper.start()
    helper.join(PUBLISH_TIMEOUT_S + 1.0)
    if helper.is_alive():
        raise TimeoutError(f"channel layer did not answer within {PUBLISH_TIMEOUT_S} s")
    if "error" in outcome:
        raise outcome["error"]


async def _group_send_all(layer: Any, items: list[tuple[str, dict]]) -> None:
    async def send() -> None:
        for group, message in items:
            await layer.group_send(group, message)

    await asyncio.wait_for(send(), timeout=PUBLISH_TIMEOUT_S)


def discard_pending() -> None:
    """Forget this thread's hints not sent yet (tests: those a rolled-back test transaction left)."""
    _pending().clear()
    _changed_job_ids().clear()
    _local.registered = None


def reset_cooldown() -> None:
    """Forget a past failure and the submission throttle (tests, or after the channel layer is known to be back)."""
    global _cooldown_until, _last_submission_hint
    with _cooldown_lock:
        _cooldown_until = 0.0
        _last_submission_hint = float("-inf")


# --- Signals: every transition and every stored log chunk is published ------


def _on_job_event(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if created and not raw:
        if instance.from_state:
            publish_job_changed(instance.job_id)
        else:  # the submission event: a new queue entry
            publish_job_submitted(instance.job_id)


def _on_log_chunk(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if created and not raw:
        attempt = instance.attempt  # usually cached: the writer passed the attempt object
        publish_log_lines(attempt.job_id, attempt.number)


def _on_node_saved(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:  # or deleted
    if not raw:
        publish_cluster_changed()


def connect_signals() -> None:
    """Publish on every saved JobEvent, AttemptLog and Node, and every deleted Node (idempotent).

    A node saved with ``save()`` (registration, an admin's edit) or deleted (an
    admin's) refreshes the cluster page; heartbeats written with ``.update()``
    do not, on purpose.
    """
    from django.db.models.signals import post_delete, post_save

    from cluster.models import Node
    from scheduler.models import AttemptLog, JobEvent

    post_save.connect(_on_job_event, sender=JobEvent, dispatch_uid="realtime.job_event")
    post_save.connect(_on_log_chunk, sender=AttemptLog, dispatch_uid="realtime.log_chunk")
    post_save.connect(_on_node_saved, sender=Node, dispatch_uid="realtime.node")
    post_delete.connect(_on_node_saved, sender=Node, dispatch_uid="realtime.node_deleted")

"""Celery tasks for the agents' REPORT_* messages: check the signature, parse, call one service.

A malformed report is logged with the field at fault and dropped (raising
would only make Celery log a traceback; the agent cannot fix a message it
already sent). Unknown extra kwargs are accepted so agents may add fields.

Delivery: a report is acknowledged to the broker only once it has been
handled (``acks_late``), so a report whose worker dies while handling it
(SIGKILL, OOM, machine lost) is delivered again: at once when only the pool
process died (``reject_on_worker_lost``), after ``BROKER_VISIBILITY_TIMEOUT``
when the whole worker did. Handling a report twice is harmless: every report
but a log batch is idempotent by (job, attempt) and node, and a log batch is
stored once per message (a marker in Redis keyed by the message's id). A
report that kills its worker every time would come back for ever, so one
delivered again more than ``MAX_REDELIVERIES`` times is logged and dropped.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import redis
from celery import shared_task
from django import db
from django.conf import settings
from django.utils import timezone as dj_timezone

from audit import services as audit
from audit.models import Action
from cluster import auth, commands, liveness, protocol, protocol_versions, registration, reports, server_identity
from cluster import tick as safety_tick
from cluster.protocol import ProtocolError
from cluster.report_fields import (parse_amount, parse_count, parse_exit, parse_job_id,
                                   parse_node, parse_optional_int, parse_reported_exits, parse_running,
                                   parse_strings, parse_time, reported_exit_ids)
from scheduler import job_ids, row_locks

log = logging.getLogger(__name__)

MAX_LINES_PER_REPORT = 100_000


# A report that finds the database unreachable is retried this often, a second apart (a retry is a
# new message; the one being handled is acknowledged once the retry is queued).
DB_RETRIES = 600
DB_RETRY_DELAY_S = 1.0

# A report delivered again more often than this (its worker died each time it handled it) is dropped.
MAX_REDELIVERIES = 3
# Redis keys of the delivery counts and of the log batches already stored; they expire after a day,
# far longer than any message stays in the broker.
REDELIVERIES_KEY = "gpusched:report:redeliveries:{id}:{retries}"
STORED_KEY = "gpusched:report:stored:{id}:{retries}"
MARK_TTL_S = 24 * 3600

_redis: redis.Redis | None = None


def _marks() -> redis.Redis:
    """The Redis client of the delivery counts and stored marks (one per process)."""
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    return _redis


def delivered_too_often(request: Any) -> int | None:
    """How often this message has been delivered again, if that is more than ``MAX_REDELIVERIES``
    (drop it); None otherwise. A first delivery costs nothing: only redelivered messages are counted
    (the broker flags them), in Redis, since the process that counted the last one may be dead."""
    if not (request.delivery_info or {}).get("redelivered") or not request.id:
        return None
    key = REDELIVERIES_KEY.format(id=request.id, retries=request.retries or 0)
    try:
        pipe = _marks().pipeline()
        pipe.incr(key)
        pipe.expire(key, MARK_TTL_S)
        count = int(pipe.execute()[0])
    except redis.RedisError as exc:  # no count: handle it rather than risk dropping a good report
        log.warning("could not count the deliveries of report %s (%s)", request.id, exc)
        return None
    return count if count > MAX_REDELIVERIES else None


def _stored_key(request: Any) -> str | None:
    return STORED_KEY.format(id=request.id, retries=request.retries or 0) if request.id else None


def already_stored(request: Any) -> bool:
    """Whether this message's log batch is already stored (an earlier delivery of it got that far)."""
    key = _stored_key(request)
    if key is None:
        return False
    try:
        return bool(_marks().exists(key))
    except redis.RedisError as exc:
        log.warning("could not check whether log report %s was stored (%s)", request.id, exc)
        return False


def mark_stored(request: Any) -> None:
    key = _stored_key(request)
    if key is None:
        return
    try:
        _marks().set(key, 1, ex=MARK_TTL_S)
    except redis.RedisError as exc:  # a later delivery of the same message would store it again
        log.warning("could not mark log report %s as stored (%s)", request.id, exc)


#: Fields of every report that are about its sender, not its content.
_ENVELOPE = ("node", "token", "signature", "signed_at", server_identity.FIELD)


def report_task(name: str, *, once: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """A REPORT_* task: signature checked, ProtocolError/AgentAuthError logged and dropped, retried
    while the database cannot be reached (reports are idempotent, so a retry is harmless),
    acknowledged only once handled. ``once``: the report is not idempotent (a log batch), so a
    message handled before is not handled again."""

    def wrap(fn: Callable[..., Any]) -> Any:
        def task(self: Any, **kwargs: Any) -> Any:
            node = kwargs.get("node")
            redelivered = delivered_too_often(self.request)
            if redelivered is not None:
                log.error("%s from node %r dropped: delivered again %d times (each time its worker died, "
                          "or held it past BROKER_VISIBILITY_TIMEOUT)", name, node, redelivered)
                return None
            if once and already_stored(self.request):
                log.info("%s from node %r already stored; delivered again, ignored", name, node)
                return None
            try:
                node = check_sender(name, kwargs)
                other = server_identity.names_another(kwargs) if name not in server_identity.ANY_CLUSTER else None
                if other is not None:
                    server_identity.log_ignored(name, node, other)
                    if name == protocol.REPORT_HEARTBEAT:
                        # Its command tells the agent this server's cluster.
                        liveness.ask_to_register(node, "heartbeat naming another cluster from node")
                    return None
                # A row held by another transaction past the limit fails the report, which is retried:
                # waiting on it would hold a worker process that the scheduling loop may need.
                with row_locks.session_waiting_at_most():
                    result = fn(node=node, **{k: v for k, v in kwargs.items() if k not in _ENVELOPE})
            except protocol_versions.UnsupportedVersion as exc:
                log.error("%s from node %r refused: %s", name, node, exc)
                if name == protocol.REPORT_REGISTER:
                    commands.refuse(node, str(exc))
            except ProtocolError as exc:
                log.error("%s from node %r dropped: %s", name, node, exc)
            except auth.AgentAuthError as exc:
                log.error("%s dropped: %s", name, exc)
                audit_refusal(name, node, str(exc))
            except (db.OperationalError, db.InterfaceError) as exc:
                if row_locks.is_lock_timeout(exc):
                    log.warning("%s from node %r: a row it writes is held by another transaction for over "
                                "SCHEDULER_ROW_LOCK_WAIT; retrying", name, node)
                else:
                    log.warning("%s from node %r: database unreachable (%s); retrying", name, node, exc)
                raise self.retry(countdown=DB_RETRY_DELAY_S, max_retries=DB_RETRIES) from None
            else:
                if once:
                    mark_stored(self.request)
                return result
            return None

        task.__name__, task.__qualname__, task.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        # typing=False: unknown kwargs from newer agents must not be refused by Celery.
        # from_nodes: sent by agents, so not sealed by the server (cluster.task_seal); the signature checks it.
        return shared_task(name=name, ignore_result=True, typing=False, bind=True, acks_late=True,
                           reject_on_worker_lost=True, from_nodes=True)(task)

    return wrap


#: A refused node's reports of one kind are audited at most this often per worker process (a refused
#: agent keeps sending heartbeats); every refused registration is.
REFUSAL_AUDIT_INTERVAL_S = 60.0
_last_refusal_audit: dict[str, float] = {}


def audit_refusal(task: str, node: Any, why: str) -> None:
    """Record a refused report in the audit log: at most once per ``REFUSAL_AUDIT_INTERVAL_S`` per
    report kind and node (a misconfigured agent sends many), every refused registration."""
    key, now = f"{task} {node}", time.monotonic()
    if task != protocol.REPORT_REGISTER and now - _last_refusal_audit.get(key, -math.inf) < REFUSAL_AUDIT_INTERVAL_S:
        return
    _last_refusal_audit[key] = now
    audit.record(Action.AGENT_REFUSED, target=f"node {node}", actor_name=f"node {node}", detail=f"{task}: {why}")


def check_sender(task: str, kwargs: dict[str, Any]) -> str:
    """The node a ``task`` report comes from, once its name, signature (or token) and protocol version
    are checked.

    Raises ProtocolError (malformed name or version), auth.AgentAuthError (wrong signature or token) or
    protocol_versions.UnsupportedVersion.
    """
    node = parse_node(kwargs.get("node"))
    auth.check_report(node, task, kwargs)
    protocol_versions.check_version(protocol_versions.message_version(kwargs), commands.server_protocol_version(),
                                    f"the agent of node {node}")
    return node


# --- tasks ----------------------------------------------------------------------


@report_task(protocol.REPORT_REGISTER)
def register(node: str, gpus: Any = None, cpus: Any = 0.0, mem_gb: Any = 0.0, gpu_models: Any = (),
             agent_version: Any = "", address: Any = "", protocol_version: Any = 1, **_extra: Any) -> None:
    if not isinstance(agent_version, str):
        raise ProtocolError("agent_version", f"must be a string, got {agent_version!r}")
    registration.register_node(
        node,
        gpus=parse_count(gpus, "gpus"),
        cpus=parse_amount(cpus, "cpus"),
        mem_gb=parse_amount(mem_gb, "mem_gb"),
        gpu_models=parse_strings(gpu_models, "gpu_models", 4096),
        agent_version=agent_version,
        now=dj_timezone.now(),
        address=protocol.check_address(address or "", "address"),
        protocol_version=protocol_versions.message_version({protocol_versions.PROTOCOL_FIELD: protocol_version}),
    )


@report_task(protocol.REPORT_HEARTBEAT)
def heartbeat(node: str, running: Any = (), exited: Any = (), **_extra: Any) -> None:
    attempts = parse_running(running)
    highest = max([job for job, _ in attempts] + reported_exit_ids(exited), default=0)
    if highest:
        job_ids.catch_up(highest, node)
    # Read only when the heartbeat ends an attempt it no longer lists (rare): most heartbeats never need them.
    liveness.heartbeat(node, attempts, dj_timezone.now(),
                       exited=lambda: parse_reported_exits(node, exited))


@report_task(protocol.REPORT_STARTED)
def started(node: str, job_id: Any = None, attempt: Any = None, pid: Any = None, started_at: Any = None,
            **_extra: Any) -> None:
    reports.attempt_started(
        node,
        parse_job_id(job_id),
        protocol.check_attempt(attempt),
        parse_optional_int(pid, "pid"),
        parse_time(started_at, "started_at"),
    )


@report_task(protocol.REPORT_EXITED)
def exited(node: str, job_id: Any = None, attempt: Any = None, **fields: Any) -> None:
    job, number, outcome = parse_exit({"job_id": job_id, "attempt": attempt, **fields})
    reports.attempt_exited(node, job, number, **outcome, now=dj_timezone.now())


@report_task(protocol.REPORT_LOG, once=True)
def log_lines(node: str, job_id: Any = None, attempt: Any = None, lines: Any = (), **_extra: Any) -> None:
    reports.append_log(
        parse_job_id(job_id),
        protocol.check_attempt(attempt),
        parse_strings(lines, "lines", MAX_LINES_PER_REPORT),
        dj_timezone.now(),
        node=node,
    )


# Named in the scheduler's namespace, as Celery beat's schedule (settings.CELERY_BEAT_SCHEDULE) knows it.
TICK_TASK = "scheduler.tick"


@shared_task(name=TICK_TASK, ignore_result=True)
def tick() -> dict[str, object]:
    """Celery beat's periodic safety tick (``cluster.tick``)."""
    return safety_tick.tick()

"""Reading the telemetry stream (``cluster.telemetry_stream``) into the store, a batch at a time.

A drain reads up to ``BATCH`` reports per round trip through the stream's
consumer group, checks each as the Celery report task would (node name, token,
protocol version, schema; a report failing a check is logged and dropped),
stores the good ones with ``services.ingest_many`` and acknowledges the batch.

One drain runs at a time (``drain_alone``, a Redis lock), so a node's reports
are stored in the order they were sent; a drain that finds another running
leaves it the stream.

Delivery is at least once, as for Celery reports: a batch is acknowledged only
once stored, so the reports of a worker that died while storing them stay
pending in the group and the next drain takes them over once they have been
pending for ``RECLAIM_IDLE_MS``. Storing a report twice is harmless (a ring
slot is overwritten with the same record). A report whose handling killed its
worker ``MAX_DELIVERIES`` times is dropped with a log line.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from cluster import auth, protocol, telemetry_schema
from cluster.protocol import ProtocolError
from cluster.tasks import MAX_REDELIVERIES, audit_refusal, check_sender
from cluster.telemetry_schema import TelemetryReport
from cluster.telemetry_stream import FIELD, GROUP, MAX_ENTRY_BYTES, STREAM_KEY
from gputelemetry import services

log = logging.getLogger(__name__)

BATCH = 500
#: An entry read but not acknowledged for this long belongs to a consumer that died (a batch takes
#: well under a second to store).
RECLAIM_IDLE_MS = 60_000
MAX_DELIVERIES = MAX_REDELIVERIES
#: Consumers (worker processes) gone this long with nothing pending are removed from the group.
FORGET_CONSUMER_MS = 24 * 3600 * 1000

#: The lock of ``drain_alone``; it lapses after ``LOCK_TIMEOUT_S`` if its holder dies.
LOCK_KEY = "gpusched:telemetry-stream:draining"
LOCK_TIMEOUT_S = 30.0

_FIELD = FIELD.encode()
_group_ready: set[int] = set()


@dataclass
class Drained:
    """What one drain did: entries read, reports stored, entries dropped, stale entries taken over."""

    read: int = 0
    stored: int = 0
    dropped: int = 0
    reclaimed: int = 0


def consumer_name() -> str:
    """This process's name in the consumer group."""
    return f"{socket.gethostname()}:{os.getpid()}"


def drain(conn: redis.Redis, consumer: str, store: redis.Redis | None = None, budget_s: float = 0.8,
          batch: int = BATCH, clock: Callable[[], float] = time.monotonic) -> Drained:
    """Store the reports waiting in the stream (on ``conn``, the broker's Redis) into the telemetry
    store (``store``; ``services.client()`` when None), batch by batch, until the stream is empty or
    ``budget_s`` is spent (checked between batches). Raises redis.RedisError and database errors;
    what was read and not stored then stays pending and is taken over by a later drain."""
    ensure_group(conn)
    done = Drained()
    try:
        _take_over_stale(conn, consumer, batch, done, store)
        deadline = clock() + budget_s
        while True:
            found = conn.xreadgroup(GROUP, consumer, {STREAM_KEY: ">"}, count=batch)
            entries = found[0][1] if found else []
            if entries:
                handle(conn, entries, done, store)
            if len(entries) < batch or clock() >= deadline:
                return done
    except redis.ResponseError as exc:  # the stream or its group is gone (Redis restarted empty, keys flushed)
        if "NOGROUP" not in str(exc):
            raise
        _group_ready.discard(id(conn))
        ensure_group(conn)
        return done


def drain_alone(conn: redis.Redis, consumer: str, **options: Any) -> Drained | None:
    """``drain`` unless another drain holds the lock (then None: it is reading the stream)."""
    lock = conn.lock(LOCK_KEY, timeout=LOCK_TIMEOUT_S, blocking=False)
    if not lock.acquire(blocking=False):
        return None
    try:
        return drain(conn, consumer, **options)
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:  # held past its timeout; another drain may have started
            log.warning("the telemetry drain outlived its lock (%.0f s)", LOCK_TIMEOUT_S)


def ensure_group(conn: redis.Redis) -> None:
    """Create the stream and its consumer group unless this process already did (reading from the start:
    reports sent before the first drain are read too)."""
    if id(conn) in _group_ready:
        return
    try:
        conn.xgroup_create(STREAM_KEY, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
    _group_ready.add(id(conn))


def handle(conn: redis.Redis, entries: list[tuple[bytes, dict | None]], done: Drained,
           store: redis.Redis | None = None) -> None:
    """Check and store (in ``store``) one batch of stream entries, then acknowledge them all on ``conn``."""
    reports = []
    for entry_id, fields in entries:
        checked = accept(entry_id, fields)
        if checked is None:
            done.dropped += 1
        else:
            reports.append(checked)
    if reports:
        services.ingest_many(reports, store)
    conn.xack(STREAM_KEY, GROUP, *[entry_id for entry_id, _ in entries])
    done.read += len(entries)
    done.stored += len(reports)


def accept(entry_id: bytes, fields: dict | None) -> tuple[str, TelemetryReport] | None:
    """(node, checked report) of one entry; None, with a log line saying why, for an entry to drop."""
    if fields is None:  # trimmed from the stream while it was pending
        return None
    raw = fields.get(_FIELD)
    if raw is None or len(raw) > MAX_ENTRY_BYTES:
        log.error("telemetry entry %s dropped: %s", entry_id.decode(),
                  f"no {FIELD!r} field" if raw is None else f"{len(raw)} bytes, over {MAX_ENTRY_BYTES}")
        return None
    kwargs: Any = None
    try:
        kwargs = json.loads(raw)
        if not isinstance(kwargs, dict):
            raise ProtocolError("report", "must be a JSON object")
        node = check_sender(protocol.REPORT_TELEMETRY, kwargs)
        return node, telemetry_schema.check_report(kwargs.get("sampled_at"), kwargs.get("gpus", ()),
                                                   kwargs.get("jobs", ()))
    except auth.AgentAuthError as exc:
        log.error("%s dropped: %s", protocol.REPORT_TELEMETRY, exc)
        audit_refusal(protocol.REPORT_TELEMETRY, kwargs.get("node"), str(exc))
    except (ProtocolError, ValueError) as exc:  # ValueError: not JSON, or a protocol version not spoken here
        node = kwargs.get("node") if isinstance(kwargs, dict) else None
        log.error("%s from node %r dropped: %s", protocol.REPORT_TELEMETRY, node, exc)
    return None


def _take_over_stale(conn: redis.Redis, consumer: str, batch: int, done: Drained, store: redis.Redis | None) -> None:
    """Handle the entries other consumers read and never acknowledged (they died), dropping those
    delivered ``MAX_DELIVERIES`` times already; forget long-gone consumers."""
    stale = conn.xpending_range(STREAM_KEY, GROUP, min="-", max="+", count=batch, idle=RECLAIM_IDLE_MS)
    poison = [p["message_id"] for p in stale if p["times_delivered"] >= MAX_DELIVERIES]
    if poison:
        log.error("%d telemetry entries dropped: delivered %d times, each time unacknowledged (their worker "
                  "died): %s", len(poison), MAX_DELIVERIES, ", ".join(i.decode() for i in poison[:10]))
        conn.xack(STREAM_KEY, GROUP, *poison)
        done.dropped += len(poison)
    retry = [p["message_id"] for p in stale if p["times_delivered"] < MAX_DELIVERIES]
    if retry:
        entries = conn.xclaim(STREAM_KEY, GROUP, consumer, RECLAIM_IDLE_MS, retry)
        claimed = {entry_id for entry_id, _ in entries}
        # Entries trimmed from the stream since are not returned: acknowledge them, nothing is left to store.
        gone = [i for i in retry if i not in claimed]
        if gone:
            conn.xack(STREAM_KEY, GROUP, *gone)
        done.reclaimed += len(entries)
        handle(conn, entries, done, store)
    _forget_gone_consumers(conn)


def _forget_gone_consumers(conn: redis.Redis) -> None:
    for c in conn.xinfo_consumers(STREAM_KEY, GROUP):
        if c["pending"] == 0 and c["idle"] > FORGET_CONSUMER_MS:
            conn.xgroup_delconsumer(STREAM_KEY, GROUP, c["name"])

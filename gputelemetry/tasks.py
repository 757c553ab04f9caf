"""Telemetry's Celery tasks: draining the telemetry stream, and REPORT_TELEMETRY as a Celery report.

Agents whose broker is Redis send telemetry through the stream (``cluster.telemetry_stream``),
drained every ``GPUSCHED_TELEMETRY_DRAIN_SECONDS`` by beat; others, and agents from before the
stream, send the report task, which stays.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from cluster import protocol, telemetry_schema
from cluster.tasks import report_task
from gputelemetry import drain as stream_drain
from gputelemetry import services

log = logging.getLogger(__name__)

DRAIN_TASK = "gputelemetry.drain"


@report_task(protocol.REPORT_TELEMETRY)
def telemetry(node: str, sampled_at: Any = None, gpus: Any = (), jobs: Any = (), **_extra: Any) -> None:
    # Fields a newer agent adds are ignored; a report failing the check is logged naming the field, and dropped.
    services.ingest(node, telemetry_schema.check_report(sampled_at, gpus, jobs))


@shared_task(name=DRAIN_TASK, ignore_result=True)
def drain() -> int:
    """Store the telemetry waiting in the stream; returns the entries read (0 when another drain is
    running). One that fails leaves its batch for a later one."""
    stream = services.stream_client()
    if stream is None:  # the broker is not Redis: agents send Celery report tasks
        return 0
    done = stream_drain.drain_alone(stream, stream_drain.consumer_name())
    if done is None:
        return 0
    if done.dropped or done.reclaimed:
        log.info("telemetry drain: %d read, %d stored, %d dropped, %d taken over from dead consumers",
                 done.read, done.stored, done.dropped, done.reclaimed)
    return done.read

"""Storing telemetry reports (the only writer of the telemetry rings).

``ingest_many`` takes checked reports (of one node each) and writes, in one Redis
round trip (a pipeline of one ``store.write_report`` script per report), every
GPU's ring and latest reading and every attempt's job-level ring. It reads
nothing first.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings

from django.utils import timezone

from cluster import gpu_health, telemetry_stream
from cluster.telemetry_schema import JobSample, TelemetryReport
from gputelemetry import store
from scheduler import idleness

log = logging.getLogger(__name__)

_client: redis.Redis | None = None
_stream_client: redis.Redis | None = None


def client() -> redis.Redis:
    """The process-wide Redis client of the telemetry store (short timeouts: telemetry never stalls a worker)."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    return _client


def stream_client() -> redis.Redis | None:
    """The process-wide Redis client of the broker, where agents append telemetry
    (``cluster.telemetry_stream``); None when the broker is not Redis."""
    global _stream_client
    if _stream_client is None:
        url = telemetry_stream.redis_url(settings.CELERY_BROKER_URL)
        if url is None:
            return None
        _stream_client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    return _stream_client


def job_record(job: JobSample, by_index: dict, t: float) -> bytes | None:
    """The job-level record of one attempt: its GPUs' mean utilisation, hottest temperature, summed power
    and memory, and its processes' memory; None when the report has none of its GPUs."""
    gpus = [by_index[i] for i in job.gpus if i in by_index]
    if not gpus:
        return None
    return store.pack(t, sum(g.util for g in gpus) / len(gpus), max(g.temp for g in gpus),
                      sum(g.power for g in gpus), sum(g.fb_used for g in gpus), job.proc_mem)


def ingest(node: str, report: TelemetryReport, conn: redis.Redis | None = None) -> int:
    """Store ``report`` of ``node``; returns the number of rings written (``ingest_many`` of one)."""
    return ingest_many([(node, report)], conn)


def ingest_many(reports: list[tuple[str, TelemetryReport]], conn: redis.Redis | None = None) -> int:
    """Store ``reports`` (node, report) in one Redis round trip; returns the number of rings written.

    Attempts with an id that is not this server's (not a whole number) are skipped. GPUs that a
    report shows failing are taken out of service (``gpu_health.check_telemetry``), and with idle
    reclaim on, each attempt's idle mark is kept (``scheduler.idleness``).
    """
    conn = conn or client()
    policy = gpu_health.policy()
    pipe = conn.pipeline(transaction=False)
    written = 0
    for node, report in reports:
        proc_mem, jobs, utilisation = _attempts(report)
        written += store.write_report(conn, node, report.sampled_at, report.gpus, proc_mem, jobs, pipe)
        if policy.idle_after_s > 0 and utilisation:  # idle reclaim on: who is idle since when
            idleness.track(pipe, node, report.sampled_at, utilisation, policy.idle_util_threshold)
    pipe.execute()
    now = timezone.now()
    for node, report in reports:
        gpu_health.check_telemetry(node, report.gpus, now)
    return written


def _attempts(report: TelemetryReport) -> tuple[dict[int, int], list[tuple[int, int, bytes]], list]:
    """Of one report: its jobs' process memory per GPU index, each attempt's job-level record
    (job id, attempt, record) and each attempt's mean utilisation (job id, attempt, percent)."""
    by_index = {g.index: g for g in report.gpus}
    proc_mem: dict[int, int] = {}
    jobs, utilisation = [], []
    for job in report.jobs:
        if isinstance(job.job_id, str) and not job.job_id.isdigit():
            continue
        record = job_record(job, by_index, report.sampled_at)
        if record is None:
            continue
        jobs.append((int(job.job_id), job.attempt, record))
        held = [by_index[i].util for i in job.gpus if i in by_index]
        utilisation.append((int(job.job_id), job.attempt, sum(held) / len(held)))
        share = job.proc_mem // max(1, len(job.gpus))
        for i in job.gpus:
            proc_mem[i] = share
    return proc_mem, jobs, utilisation

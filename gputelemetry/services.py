"""Storing telemetry reports (the only writer of the telemetry rings).

``ingest`` takes one checked report of one node and writes, in a single Redis
command (``store.write_report``), every GPU's ring and latest reading and every
attempt's job-level ring. It reads nothing first.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings

from django.utils import timezone

from cluster import gpu_health
from cluster.telemetry_schema import JobSample, TelemetryReport
from gputelemetry import store
from scheduler import idleness

log = logging.getLogger(__name__)

_client: redis.Redis | None = None


def client() -> redis.Redis:
    """The process-wide Redis client of the telemetry store (short timeouts: telemetry never stalls a worker)."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    return _client


def job_record(job: JobSample, by_index: dict, t: float) -> bytes | None:
    """The job-level record of one attempt: its GPUs' mean utilisation, hottest temperature, summed power
    and memory, and its processes' memory; None when the report has none of its GPUs."""
    gpus = [by_index[i] for i in job.gpus if i in by_index]
    if not gpus:
        return None
    return store.pack(t, sum(g.util for g in gpus) / len(gpus), max(g.temp for g in gpus),
                      sum(g.power for g in gpus), sum(g.fb_used for g in gpus), job.proc_mem)


def ingest(node: str, report: TelemetryReport, conn: redis.Redis | None = None) -> int:
    """Store ``report`` of ``node``; returns the number of rings written.

    Attempts with an id that is not this server's (not a whole number) are skipped.
    """
    t = report.sampled_at
    by_index = {g.index: g for g in report.gpus}
    proc_mem: dict[int, int] = {}
    jobs, utilisation = [], []
    for job in report.jobs:
        if isinstance(job.job_id, str) and not job.job_id.isdigit():
            continue
        record = job_record(job, by_index, t)
        if record is not None:
            jobs.append((int(job.job_id), job.attempt, record))
            held = [by_index[i].util for i in job.gpus if i in by_index]
            utilisation.append((int(job.job_id), job.attempt, sum(held) / len(held)))
            share = job.proc_mem // max(1, len(job.gpus))
            for i in job.gpus:
                proc_mem[i] = share
    conn = conn or client()
    written = store.write_report(conn, node, t, report.gpus, proc_mem, jobs)
    gpu_health.check_telemetry(node, report.gpus, timezone.now())
    policy = gpu_health.policy()
    if policy.idle_after_s > 0 and utilisation:  # idle reclaim on: who is idle since when (scheduler.idleness)
        pipe = conn.pipeline(transaction=False)
        idleness.track(pipe, node, t, utilisation, policy.idle_util_threshold)
        pipe.execute()
    return written

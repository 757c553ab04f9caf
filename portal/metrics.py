"""Prometheus metrics: what ``/metrics`` exposes and how the loop records cycle times.

Everything that is state (queue, running jobs, GPUs, nodes) or history kept in
the database anyway (submit-to-start latency, preemptions, lost GPU-seconds) is
computed from the database at scrape time, so every web process reports the
same numbers and nothing is lost when a process restarts. The one measurement
the database does not hold, the duration of a scheduling cycle, is recorded by
the loop (a Celery worker, another process) with
``scheduler.cycle_metrics.record_cycle_duration`` into a Redis hash that the
scrape reads.

Metric names (all prefixed ``gpusched_``):

* ``queue_length{job_class,reason}``: PENDING jobs by class and pending reason
  (``none`` before the scheduler has looked at the job);
* ``jobs{job_class,state}``: jobs in each live state;
* ``running_jobs{job_class}``: jobs in state RUNNING;
* ``gpus{state}``: GPUs ``allocated`` / ``free`` on schedulable (UP) nodes and
  ``unavailable`` on the others; ``gpus_allocated{job_class}``: GPUs held by
  jobs of each class; ``nodes{state}``: nodes per state;
* ``scheduling_cycle_seconds``: histogram of cycle wall time;
* ``submit_to_start_seconds{job_class}``: histogram of first start minus
  submission, one sample per job that has started;
* ``preemptions_total{job_class}``: finished preemptions (attempts that ended
  PREEMPTED); ``preemptions_checkpointed_total{job_class}``: those of them
  that wrote a checkpoint in time; ``preemption_lost_gpu_seconds_total{job_class}``.

Per GPU, the latest telemetry under DCGM exporter's names (``DCGM_FI_DEV_*``) and
``gpusched_gpu_healthy``: ``gputelemetry/exporter.py``.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
from collections.abc import Iterable, Iterator, Sequence

from portal.dashboard.metrics_state import metrics_state
from portal.dashboard.start_latency import LATENCY_BUCKETS
from scheduler.cycle_metrics import PREFIX, le_label, read_cycle_histogram

# --- Collecting (the scrape) -------------------------------------------------


class SchedulerCollector:
    """A prometheus_client collector reading the database (and Redis) on every scrape."""

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        state = metrics_state()

        queue = GaugeMetricFamily(f"{PREFIX}_queue_length", "Pending jobs by class and pending reason.",
                                  labels=["job_class", "reason"])
        for (job_class, reason), n in sorted(state.queue.items()):
            queue.add_metric([job_class, reason or "none"], n)
        yield queue

        jobs = GaugeMetricFamily(f"{PREFIX}_jobs", "Jobs in each live state by class.", labels=["job_class", "state"])
        for (job_class, job_state), n in sorted(state.jobs.items()):
            jobs.add_metric([job_class, job_state], n)
        yield jobs

        running = GaugeMetricFamily(f"{PREFIX}_running_jobs", "Jobs in state RUNNING by class.", labels=["job_class"])
        for job_class in ("TE", "BE"):
            running.add_metric([job_class], state.jobs.get((job_class, "RUNNING"), 0))
        yield running

        gpus = GaugeMetricFamily(f"{PREFIX}_gpus", "GPUs: allocated and free on UP nodes, unavailable elsewhere.",
                                 labels=["state"])
        for gpu_state in ("allocated", "free", "unavailable"):
            gpus.add_metric([gpu_state], state.gpus.get(gpu_state, 0))
        yield gpus

        by_class = GaugeMetricFamily(f"{PREFIX}_gpus_allocated", "GPUs held by jobs of each class.",
                                     labels=["job_class"])
        for job_class in ("TE", "BE"):
            by_class.add_metric([job_class], state.gpus_by_class.get(job_class, 0))
        yield by_class

        nodes = GaugeMetricFamily(f"{PREFIX}_nodes", "Registered nodes by state.", labels=["state"])
        for node_state, n in sorted(state.nodes.items()):
            nodes.add_metric([node_state], n)
        yield nodes

        cycle = read_cycle_histogram()
        if cycle is not None:
            hist = HistogramMetricFamily(f"{PREFIX}_scheduling_cycle_seconds",
                                         "Wall time of one scheduling cycle (snapshot, decide, apply).")
            hist.add_metric([], cycle[0], sum_value=cycle[1])
            yield hist

        latency = HistogramMetricFamily(f"{PREFIX}_submit_to_start_seconds",
                                        "Seconds from submission to a job's first start.", labels=["job_class"])
        for job_class in ("TE", "BE"):
            counts, total = state.latency.get(job_class, ([0] * (len(LATENCY_BUCKETS) + 1), 0.0))
            buckets = [(le_label(b), c) for b, c in zip((*LATENCY_BUCKETS, math.inf), counts)]
            latency.add_metric([job_class], buckets, sum_value=total)
        yield latency

        pre = CounterMetricFamily(f"{PREFIX}_preemptions", "Finished preemptions (attempts ended PREEMPTED).",
                                  labels=["job_class"])
        ckpt = CounterMetricFamily(f"{PREFIX}_preemptions_checkpointed",
                                   "Finished preemptions whose job wrote a checkpoint in time.", labels=["job_class"])
        lost = CounterMetricFamily(f"{PREFIX}_preemption_lost_gpu_seconds",
                                   "GPU-seconds of work lost to preemptions.", labels=["job_class"])
        for job_class in ("TE", "BE"):
            count, checkpointed, lost_s = state.preemptions.get(job_class, (0, 0, 0.0))
            pre.add_metric([job_class], count)
            ckpt.add_metric([job_class], checkpointed)
            lost.add_metric([job_class], lost_s)
        yield pre
        yield ckpt
        yield lost


def exposition() -> tuple[bytes, str]:
    """The scrape body and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from prometheus_client.registry import CollectorRegistry

    from gputelemetry.exporter import dcgm_text

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector())
    return generate_latest(registry) + dcgm_text().encode(), CONTENT_TYPE_LATEST


# --- Access -------------------------------------------------------------------


def parse_networks(items: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``["10.0.0.0/8", "127.0.0.1"]`` -> networks; raises ``ValueError`` naming the bad item."""
    networks = []
    for item in items:
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or network") from None
    return networks


def access_decision(remote_addr: str | None, authorization: str | None, token: str | None,
                    networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> int:
    """HTTP status for a scrape: 200 allowed, 401 bad or missing token, 403 refused.

    Allowed when ``authorization`` is ``Bearer <token>`` with the configured
    token, or when the client address is inside one of ``networks``. With
    neither a token nor networks configured nothing is allowed.
    """
    if token and authorization:
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return 200
        return 401
    if networks and remote_addr:
        try:
            address = ipaddress.ip_address(remote_addr)
        except ValueError:
            return 403
        candidates = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)  # an IPv4 client of a dual-stack socket
        if any(a in net for a in candidates for net in networks):
            return 200
    return 401 if token else 403

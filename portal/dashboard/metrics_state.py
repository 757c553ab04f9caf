"""What ``/metrics`` reads from the database at scrape time (``portal.metrics`` exposes it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Q, Sum
from django.utils import timezone

from cluster.models import Gpu, Node, NodeState
from portal.dashboard import start_latency
from scheduler.models import LIVE_STATES, Attempt, AttemptState, Job, JobState


@dataclass
class MetricsState:
    queue: dict[tuple[str, str], int] = field(default_factory=dict)
    jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    gpus_by_class: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    latency: dict[str, tuple[list[int], float]] = field(default_factory=dict)
    preemptions: dict[str, tuple[int, int, float]] = field(default_factory=dict)


def metrics_state() -> MetricsState:
    """Everything /metrics reads from the database, in seven queries (eight when the settled part of the
    submit-to-start histogram moves forward: ``start_latency``)."""
    state = MetricsState()
    for job_class, reason, n in (
        Job.objects.filter(state=JobState.PENDING).values_list("job_class", "pending_reason").annotate(n=Count("id"))
        .values_list("job_class", "pending_reason", "n")
    ):
        state.queue[(job_class, reason)] = n
    for job_class, job_state_, n in (
        Job.objects.filter(state__in=LIVE_STATES).values_list("job_class", "state").annotate(n=Count("id"))
        .values_list("job_class", "state", "n")
    ):
        state.jobs[(job_class, job_state_)] = n

    gpu_rows = Gpu.objects.values_list("node__state").annotate(
        total=Count("id"), held=Count("id", filter=Q(allocated_to__isnull=False)),
        sick=Count("id", filter=Q(allocated_to__isnull=True, healthy=False)),
    ).values_list("node__state", "total", "held", "sick")
    state.gpus = {"allocated": 0, "free": 0, "unavailable": 0}
    for node_state, total, held, sick in gpu_rows:
        state.gpus["allocated"] += held
        if node_state == NodeState.UP:  # an unhealthy GPU (cluster/gpu_health.py) is not free: unavailable
            state.gpus["free"] += total - held - sick
            state.gpus["unavailable"] += sick
        else:
            state.gpus["unavailable"] += total - held
    state.gpus_by_class = dict(
        Gpu.objects.filter(allocated_to__isnull=False).values_list("allocated_to__job_class")
        .annotate(n=Count("id")).values_list("allocated_to__job_class", "n")
    )
    state.nodes = {s: 0 for s in NodeState.values}
    state.nodes.update(dict(Node.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n")))

    state.latency = start_latency.histogram(timezone.now())

    for job_class, n, saved, lost in (
        Attempt.objects.filter(state=AttemptState.PREEMPTED).values_list("job__job_class")
        .annotate(n=Count("id"), saved=Count("id", filter=Q(checkpointed=True)), lost=Sum("lost_gpu_seconds"))
        .values_list("job__job_class", "n", "saved", "lost")
    ):
        state.preemptions[job_class] = (n, saved, float(lost or 0.0))
    return state

"""What ``/metrics`` reads from the database at scrape time (``portal.metrics`` exposes it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum

from cluster.models import Gpu, Node, NodeState
from scheduler.models import LIVE_STATES, Attempt, AttemptState, Job, JobState

#: Upper bounds (seconds) of the submit-to-start histogram: sub-second TE starts up to day-long BE waits.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0,
)


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
    """Everything /metrics reads from the database, in seven queries."""
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

    wait = ExpressionWrapper(F("first_started_at") - F("submitted_at"), output_field=DurationField())
    buckets = {f"b{i}": Count("id", filter=Q(wait__lte=timedelta(seconds=b))) for i, b in enumerate(LATENCY_BUCKETS)}
    rows = (
        Job.objects.filter(first_started_at__isnull=False).annotate(wait=wait).values("job_class")
        .annotate(total=Count("id"), wait_sum=Sum("wait"), **buckets)
    )
    for row in rows:
        counts = [row[f"b{i}"] for i in range(len(LATENCY_BUCKETS))] + [row["total"]]
        total = row["wait_sum"].total_seconds() if row["wait_sum"] is not None else 0.0
        state.latency[row["job_class"]] = (counts, total)

    for job_class, n, saved, lost in (
        Attempt.objects.filter(state=AttemptState.PREEMPTED).values_list("job__job_class")
        .annotate(n=Count("id"), saved=Count("id", filter=Q(checkpointed=True)), lost=Sum("lost_gpu_seconds"))
        .values_list("job__job_class", "n", "saved", "lost")
    ):
        state.preemptions[job_class] = (n, saved, float(lost or 0.0))
    return state

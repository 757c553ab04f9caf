"""Reads behind the live pages and /metrics: plain JSON-ready dicts built in a few queries.

Visibility rules (the same for the pages and their WebSocket consumers):

* the cluster view shows every job that holds a GPU or waits in the queue with
  its id, name, owner, class and state, but never its command or log; a link
  to the job page (``url``) is given only for the viewer's own jobs, or every
  job for staff;
* a job's full state (timeline, attempts, ledger, log) is for its owner and
  staff only: :func:`job_for` returns None for anyone else.

Times in payloads are ISO 8601 strings (UTC) or seconds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.urls import reverse
from django.utils import timezone

from cluster.models import Gpu, Node, NodeState
from scheduler import selectors as job_selectors
from scheduler.core.metrics import percentile
from scheduler.models import (
    LIVE_STATES,
    TERMINAL_STATES,
    Attempt,
    AttemptLog,
    AttemptState,
    Job,
    JobClass,
    JobState,
)

CLASSES = (JobClass.TE.value, JobClass.BE.value)
#: Longest queue listed per class on the cluster page (the count is always exact).
QUEUE_LIST_LIMIT = 200
#: Sliding windows the latency page offers, in seconds.
LATENCY_WINDOWS = (900, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600)
DEFAULT_LATENCY_WINDOW = 24 * 3600
#: Utilization history shown on the cluster page.
UTILIZATION_WINDOW_S = 3600
UTILIZATION_BUCKETS = 60
#: Points of a CDF sent to the browser.
CDF_POINTS = 200
#: Log lines of an attempt sent when a job page (re)connects.
LOG_TAIL_LINES = 2000


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def may_see_job(user, owner_id: int) -> bool:  # noqa: ANN001 - a user model instance
    return bool(user.is_staff or user.pk == owner_id)


# --- Cluster page ------------------------------------------------------------


def _job_brief(job: Job, user, now: datetime) -> dict:  # noqa: ANN001
    """What anyone may see of a job on the cluster page (no command, no log)."""
    brief = {
        "id": job.pk,
        "name": job.name,
        "owner": job.owner.username,
        "job_class": job.job_class,
        "state": job.state,
        "num_gpus": job.num_gpus,
        "mine": job.owner_id == user.pk,
        "url": reverse("job-detail", args=[job.pk]) if may_see_job(user, job.owner_id) else None,
    }
    if job.started_at is not None and job.state not in (JobState.PENDING,):
        brief["running_s"] = max(0.0, (now - job.started_at).total_seconds())
    return brief


def gpu_status(node_state: str, job: Job | None) -> str:
    """One cell of the grid: lost, down, free, preempting, TE or BE."""
    if node_state == NodeState.NODE_LOST:
        return "lost"
    if job is None:
        return "down" if node_state == NodeState.DOWN else "free"
    if job.state in (JobState.PREEMPTING, JobState.CANCELLING):
        return "preempting"
    return job.job_class


def cluster_state(user, now: datetime | None = None) -> dict:  # noqa: ANN001
    """Nodes with their GPUs, the queue by class, totals and utilization history."""
    now = now or timezone.now()
    gpus = Gpu.objects.select_related("node", "allocated_to__owner").order_by("node__name", "index")
    nodes: dict[int, dict] = {}
    for node in Node.objects.order_by("name"):
        nodes[node.pk] = {
            "name": node.name, "state": node.state, "gpus": [], "free": 0, "total": 0,
            "last_heartbeat": iso(node.last_heartbeat), "agent_version": node.agent_version,
        }
    totals = {"gpus": 0, "allocated": 0, "free": 0, "TE": 0, "BE": 0, "preempting": 0, "lost": 0, "down": 0}
    for gpu in gpus:
        node = nodes.get(gpu.node_id)
        if node is None:
            continue
        job = gpu.allocated_to
        status = gpu_status(node["state"], job)
        node["gpus"].append({
            "index": gpu.index, "model": gpu.model_name, "memory_mb": gpu.memory_mb, "status": status,
            "job": _job_brief(job, user, now) if job is not None else None,
        })
        node["total"] += 1
        totals["gpus"] += 1
        totals[status] = totals.get(status, 0) + 1
        if job is not None:
            totals["allocated"] += 1
        elif status == "free" and node["state"] == NodeState.UP:
            node["free"] += 1
    totals["free"] = sum(n["free"] for n in nodes.values())
    return {
        "generated_at": iso(now),
        "nodes": list(nodes.values()),
        "totals": totals,
        "queue": queue_by_class(user, now),
        "utilization": utilization_series(now),
    }


def queue_by_class(user, now: datetime) -> dict:  # noqa: ANN001
    """PENDING jobs per class in the order the scheduler considers them: submission time, then id."""
    out: dict[str, dict] = {}
    for job_class in CLASSES:
        pending = Job.objects.filter(state=JobState.PENDING, job_class=job_class)
        jobs = list(pending.select_related("owner").order_by("submitted_at", "id")[:QUEUE_LIST_LIMIT])
        reasons = dict(pending.order_by().values_list("pending_reason").annotate(n=Count("id")).values_list("pending_reason", "n"))
        out[job_class] = {
            "count": sum(reasons.values()),
            "by_reason": {(k or "none"): v for k, v in sorted(reasons.items())},
            "jobs": [
                {
                    **_job_brief(job, user, now),
                    "position": position,
                    "submitted_at": iso(job.submitted_at),
                    "waiting_s": max(0.0, (now - job.submitted_at).total_seconds()),
                    "reason": job.pending_reason,
                    "message": job.pending_message,
                }
                for position, job in enumerate(jobs, start=1)
            ],
        }
    return out


def _allocated_gpus(attempt: Attempt) -> int:
    return sum(len(v) for v in (attempt.gpu_allocation or {}).values())


def utilization_series(now: datetime, window_s: int = UTILIZATION_WINDOW_S,
                       buckets: int = UTILIZATION_BUCKETS) -> dict:
    """Mean fraction of GPUs held by TE and BE attempts in each bucket of the last ``window_s``.

    Built from attempts (start, end or now, GPUs held), so it needs no
    sampling process. The capacity is today's: GPUs of the nodes that are UP.
    An attempt holds its GPUs from its start until it ended (for a preempted
    attempt: until it vacated them).
    """
    start = now - timedelta(seconds=window_s)
    width = window_s / buckets
    capacity = Gpu.objects.filter(node__state=NodeState.UP).count()
    area = {c: [0.0] * buckets for c in CLASSES}
    attempts = Attempt.objects.filter(started_at__lt=now).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
    for attempt in attempts.select_related("job").only("started_at", "ended_at", "gpu_allocation", "job__job_class"):
        gpus = _allocated_gpus(attempt)
        lo = max(attempt.started_at, start)
        hi = min(attempt.ended_at or now, now)
        if gpus == 0 or hi <= lo:
            continue
        a, b = (lo - start).total_seconds(), (hi - start).total_seconds()
        first, last = int(a // width), min(int(b // width), buckets - 1)
        for i in range(first, last + 1):
            overlap = min(b, (i + 1) * width) - max(a, i * width)
            if overlap > 0:
                area[attempt.job.job_class][i] += gpus * overlap
    cap = capacity * width
    return {
        "window_s": window_s,
        "capacity": capacity,
        "t": [iso(start + timedelta(seconds=(i + 0.5) * width)) for i in range(buckets)],
        **{c: [round(v / cap, 4) if cap else 0.0 for v in area[c]] for c in CLASSES},
    }


# --- Latency page --------------------------------------------------------------


def cdf(values: Sequence[float], points: int = CDF_POINTS) -> dict:
    """The empirical CDF of ``values`` as ``{"x": [...], "y": [...]}``, at most ``points`` points."""
    v = sorted(values)
    n = len(v)
    if n <= points:
        return {"x": v, "y": [(i + 1) / n for i in range(n)]}
    qs = [100.0 * i / (points - 1) for i in range(points)]
    return {"x": [percentile(v, q) for q in qs], "y": [q / 100.0 for q in qs]}


def _stats(values: list[float]) -> dict:
    v = sorted(values)
    return {"count": len(v), "p50": percentile(v, 50), "p95": percentile(v, 95), "cdf": cdf(v)}


def useful_run_seconds(attempts: Sequence[Attempt], num_gpus: int) -> float:
    """Run time without interruption, estimated as time on GPUs minus the work preemptions lost."""
    held = sum(((a.ended_at or a.started_at) - a.started_at).total_seconds() for a in attempts)
    lost = sum(a.lost_gpu_seconds or 0.0 for a in attempts) / max(num_gpus, 1)
    return held - lost


#: A job that ran shorter than this counts as running this long, so that jobs
#: ending at once do not dominate the slowdown tail.
MIN_RUN_SECONDS = 1.0


def latency_stats(window_s: int = DEFAULT_LATENCY_WINDOW, now: datetime | None = None) -> dict:
    """Wait and slowdown by class over the last ``window_s`` seconds, and the preemption ledger summary.

    * wait = first start - submission, for jobs that first started in the window;
      jobs still waiting are reported separately (count and longest wait so far),
      because their final wait is not known yet;
    * slowdown = (end - submission) / uninterrupted run time, for jobs that
      COMPLETED in the window; the run time is the attempts' time on GPUs minus
      the work preemptions lost (``useful_run_seconds``), at least
      ``MIN_RUN_SECONDS``;
    * ledger: preemptions whose victim vacated in the window, their rate per
      hour, the GPU-hours of work they lost, and the share of those with a known
      outcome that wrote a checkpoint in time.
    """
    now = now or timezone.now()
    since = now - timedelta(seconds=window_s)
    waits: dict[str, list[float]] = {c: [] for c in CLASSES}
    rows = Job.objects.filter(first_started_at__gte=since, first_started_at__lte=now)
    for job_class, submitted, first in rows.values_list("job_class", "submitted_at", "first_started_at"):
        waits[job_class].append(max(0.0, (first - submitted).total_seconds()))

    slowdowns: dict[str, list[float]] = {c: [] for c in CLASSES}
    done = Job.objects.filter(state=JobState.COMPLETED, ended_at__gte=since, ended_at__lte=now)
    attempts_of: dict[int, list[Attempt]] = defaultdict(list)
    for attempt in Attempt.objects.filter(job__in=done).only(
        "job_id", "started_at", "ended_at", "lost_gpu_seconds"
    ):
        attempts_of[attempt.job_id].append(attempt)
    for job in done.only("id", "job_class", "num_gpus", "submitted_at", "ended_at"):
        run = max(useful_run_seconds(attempts_of.get(job.pk, []), job.num_gpus), MIN_RUN_SECONDS)
        slowdowns[job.job_class].append((job.ended_at - job.submitted_at).total_seconds() / run)

    waiting = {}
    for job_class in CLASSES:
        pending = Job.objects.filter(state=JobState.PENDING, job_class=job_class)
        oldest = pending.order_by("submitted_at").values_list("submitted_at", flat=True).first()
        waiting[job_class] = {
            "count": pending.count(),
            "longest_s": max(0.0, (now - oldest).total_seconds()) if oldest else None,
        }

    return {
        "generated_at": iso(now),
        "window_s": window_s,
        "wait_s": {c: _stats(waits[c]) for c in CLASSES},
        "slowdown": {c: _stats(slowdowns[c]) for c in CLASSES},
        "waiting": waiting,
        "ledger": ledger_summary(since, now),
    }


def ledger_summary(since: datetime, now: datetime) -> dict:
    """Preemptions that vacated their GPUs in ``[since, now]``, summed up."""
    preempted = Attempt.objects.filter(state=AttemptState.PREEMPTED).filter(
        Q(vacated_at__gte=since, vacated_at__lte=now) | Q(vacated_at__isnull=True, ended_at__gte=since, ended_at__lte=now)
    )
    agg = preempted.aggregate(
        n=Count("id"),
        known=Count("id", filter=Q(checkpointed__isnull=False)),
        saved=Count("id", filter=Q(checkpointed=True)),
        lost=Sum("lost_gpu_seconds"),
    )
    by_class = dict(preempted.values_list("job__job_class").annotate(n=Count("id")).values_list("job__job_class", "n"))
    hours = (now - since).total_seconds() / 3600.0
    return {
        "preemptions": agg["n"],
        "per_hour": agg["n"] / hours if hours > 0 else None,
        "lost_gpu_hours": (agg["lost"] or 0.0) / 3600.0,
        "checkpointed": agg["saved"],
        "checkpoint_known": agg["known"],
        "checkpointed_share": agg["saved"] / agg["known"] if agg["known"] else None,
        "victims_by_class": {c: by_class.get(c, 0) for c in CLASSES},
    }


# --- Job page --------------------------------------------------------------------


def job_for(user, job_id: int) -> Job | None:  # noqa: ANN001
    """The job if ``user`` may see all of it (owner or staff), else None."""
    return job_selectors.job_with_history(user, job_id)


def job_state(job: Job) -> dict:
    """A job's live page state: state, reason, timeline, attempts with ledger (owner/staff only)."""
    attempts = list(job.attempts.all())
    return {
        "id": job.pk,
        "state": job.state,
        "pending_reason": job.pending_reason,
        "pending_message": job.pending_message,
        "terminal": job.state in TERMINAL_STATES,
        "can_cancel": job.state not in TERMINAL_STATES,
        "attempt_count": job.attempt_count,
        "preemption_count": job.preemption_count,
        "reconfiguration_count": job.reconfiguration_count,
        "first_started_at": iso(job.first_started_at),
        "ended_at": iso(job.ended_at),
        "exit_code": job.exit_code,
        "events": [
            {"at": iso(e.at), "from": e.from_state, "state": e.to_state, "reason": e.reason, "message": e.message}
            for e in job.events.all()
        ],
        "attempts": [
            {
                "number": a.number,
                "allocation": {k: list(v) for k, v in sorted((a.gpu_allocation or {}).items())},
                "state": a.state,
                "started_at": iso(a.started_at),
                "ended_at": iso(a.ended_at),
                "exit_code": a.exit_code,
                "signal": a.signal,
                "notice_at": iso(a.notice_at),
                "vacated_at": iso(a.vacated_at),
                "checkpointed": a.checkpointed,
                "lost_gpu_seconds": a.lost_gpu_seconds,
                "plan": a.plan,
                "gpu_count": a.gpu_count,
                "grad_accum_steps": a.grad_accum_steps,
                "notice_reason": a.notice_reason,
            }
            for a in attempts
        ],
    }


def log_chunks_after(job_id: int, attempt_number: int, after_id: int | None) -> tuple[list[str], int | None, bool]:
    """Log lines of one attempt stored after chunk ``after_id`` (None: from the start).

    Returns ``(lines, last chunk id, truncated)``; from the start, only the last
    ``LOG_TAIL_LINES`` lines are returned and ``truncated`` says whether earlier
    ones were left out. The last id is ``after_id`` when nothing is new.
    """
    chunks = AttemptLog.objects.filter(attempt__job_id=job_id, attempt__number=attempt_number)
    if after_id is not None:
        chunks = chunks.filter(id__gt=after_id)
    lines: list[str] = []
    last = after_id
    for chunk_id, text in chunks.order_by("id").values_list("id", "text"):
        lines.extend(text.split("\n"))
        last = chunk_id
    truncated = after_id is None and len(lines) > LOG_TAIL_LINES
    if truncated:
        lines = lines[-LOG_TAIL_LINES:]
    return lines, last, truncated


# --- /metrics ----------------------------------------------------------------------


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
    from portal.metrics import LATENCY_BUCKETS

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
        total=Count("id"), held=Count("id", filter=Q(allocated_to__isnull=False))
    ).values_list("node__state", "total", "held")
    state.gpus = {"allocated": 0, "free": 0, "unavailable": 0}
    for node_state, total, held in gpu_rows:
        state.gpus["allocated"] += held
        if node_state == NodeState.UP:
            state.gpus["free"] += total - held
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

"""Reads behind the cluster page, and what every live page's reads share: plain JSON-ready dicts.

The other pages' reads: ``portal.dashboard.latency`` (latency page),
``portal.dashboard.job_page`` (job page), ``portal.dashboard.metrics_state``
(``/metrics``); each builds its payload in a fixed number of queries.

Visibility rules (the same for the pages and their WebSocket consumers):

* the cluster view shows every job that holds a GPU or waits in the queue with
  its id, name, owner, class and state, but never its command or log; a link
  to the job page (``url``) is given only for the viewer's own jobs, or every
  job for staff;
* a job's full state (timeline, attempts, ledger, log) is for its owner and
  staff only: ``job_page.job_for`` returns None for anyone else.

Times in payloads are ISO 8601 strings (UTC) or seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone

from cluster.models import Gpu, Node, NodeState
from cluster.selectors import agent_outdated
from scheduler import forecast_store
from scheduler.gpu_allocation import gpu_count
from scheduler.models import Attempt, Job, JobClassChoice, JobState

CLASSES = (JobClassChoice.TE.value, JobClassChoice.BE.value)
#: Longest queue listed per class on the cluster page (the count is always exact).
QUEUE_LIST_LIMIT = 200
#: Utilization history shown on the cluster page.
UTILIZATION_WINDOW_S = 3600
UTILIZATION_BUCKETS = 60


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def may_see_job(user, owner_id: int) -> bool:  # noqa: ANN001 - a user model instance
    return bool(user.is_staff or user.pk == owner_id)


# --- Cluster page ------------------------------------------------------------


def job_url_template() -> str:
    """The job page's link with ``{}`` for the job id: one ``reverse`` per read instead of one per job (at 1,000
    nodes, reversing each of 2,300 jobs' links was a quarter of the cluster page's read)."""
    marker = 987654321
    return reverse("job-detail", args=[marker]).replace(str(marker), "{}")


def _brief(job_id: int, name: str, owner_id: int, owner: str, job_class: str, state: str, num_gpus: int,
           started_at: datetime | None, url: str) -> dict:
    """What anyone may see of a job on the cluster page (no command, no log), with its ``owner_id``
    and its page's ``url`` (``url``: ``job_url_template()``), which ``_seen_by`` turns into what one viewer gets. A running job has its
    ``started_at``, not its running time: the page counts that, so a job stays the same from push to push
    and a page sent only changes (``cluster_delta``) is not sent every job again."""
    brief = {"id": job_id, "name": name, "owner": owner, "owner_id": owner_id, "job_class": job_class,
             "state": state, "num_gpus": num_gpus, "url": url.format(job_id)}
    if started_at is not None and state != JobState.PENDING:
        brief["started_at"] = iso(started_at)
    return brief


def _seen_by(brief: dict, user) -> dict:  # noqa: ANN001 - a user model instance
    """A job of the shared state as ``user`` sees it: ``mine``; the link to its page, and its forecast
    start in the queue, only for their own job (staff: every job); no owner id."""
    seen = {k: v for k, v in brief.items() if k != "owner_id"}
    seen["mine"] = brief["owner_id"] == user.pk
    if not may_see_job(user, brief["owner_id"]):
        seen["url"] = None
        if "forecast_start" in seen:  # the forecast is part of a job's own page
            seen["forecast_start"] = None
    return seen


def gpu_status(node_state: str, job_state: str | None, job_class: str | None, healthy: bool = True) -> str:
    """One cell of the grid: lost, down, unhealthy (out of service, no job), free, preempting, TE or BE."""
    if node_state == NodeState.NODE_LOST:
        return "lost"
    if job_state is None:
        return "down" if node_state == NodeState.DOWN else "free" if healthy else "unhealthy"
    if job_state in (JobState.PREEMPTING, JobState.CANCELLING):
        return "preempting"
    return job_class


#: One GPU row of the grid with what its status needs of the job holding it (one query, no model instances:
#: at 1,000 nodes the grid is 8,000 rows); the holders' other columns are read once per job (``_HOLDER_COLUMNS``).
_GPU_COLUMNS = ("node_id", "index", "model_name", "healthy", "unhealthy_reason", "allocated_to_id",
                "allocated_to__job_class", "allocated_to__state")
_HOLDER_COLUMNS = ("id", "name", "owner_id", "owner__username", "job_class", "state", "num_gpus", "started_at")


def cluster_state(user, now: datetime | None = None) -> dict:  # noqa: ANN001
    """Nodes with their GPUs, the jobs holding them, the queue by class, totals and utilization history,
    as ``user`` sees them (``for_viewer(shared_cluster_state(now), user)``).

    Each GPU names the job holding it by ``job_id``; ``jobs`` maps each such id (as a string, a JSON
    object's key) to what the page shows of it, once however many GPUs it holds. A GPU has ``healthy``
    (false) and ``unhealthy_reason`` only when it is out of service, and its ``model`` only when its
    node's GPUs differ; otherwise the node has the ``model``.
    """
    return for_viewer(shared_cluster_state(now), user)


def for_viewer(shared: dict, user) -> dict:  # noqa: ANN001 - a user model instance
    """The shared state as ``user`` sees it (``_seen_by`` each job); ``shared`` is not changed, so many
    viewers may be given the same one."""
    return {
        **shared,
        "jobs": {key: _seen_by(brief, user) for key, brief in shared["jobs"].items()},
        "queue": _queue_seen_by(shared["queue"], user),
    }


def changes_for_viewer(changes: dict, user) -> dict:  # noqa: ANN001 - a user model instance
    """``cluster_delta.changes`` between two shared states, as ``user`` sees them: the changed jobs and a changed
    queue through ``_seen_by``. Applied to ``for_viewer`` of the first state it gives ``for_viewer`` of the
    second (it may list a job that changed only in what this viewer does not see), so many viewers share one
    comparison of the shared states and each pays only for what changed."""
    out = {**changes, "jobs": {key: _seen_by(job, user) for key, job in changes["jobs"].items()}}
    if "queue" in changes["set"]:
        out["set"] = {**changes["set"], "queue": _queue_seen_by(changes["set"]["queue"], user)}
    return out


def _queue_seen_by(queue: dict, user) -> dict:  # noqa: ANN001 - a user model instance
    """``shared_queue``'s classes with each listed job as ``user`` sees it (``_seen_by``)."""
    return {c: {**q, "jobs": [_seen_by(j, user) for j in q["jobs"]]} for c, q in queue.items()}


def shared_cluster_state(now: datetime | None = None) -> dict:
    """What the cluster page shows, the same for every viewer: each job with its owner's id and its
    page's link, each listed waiting job with its forecast start (``for_viewer`` keeps those a viewer may
    see)."""
    now = now or timezone.now()
    nodes: dict[int, dict] = {}
    for node in Node.objects.order_by("name"):
        nodes[node.pk] = {
            "name": node.name, "state": node.state, "gpus": [], "free": 0, "total": 0,
            "last_heartbeat": iso(node.last_heartbeat), "agent_version": node.agent_version,
            "protocol_version": node.protocol_version, "agent_outdated": agent_outdated(node.protocol_version),
        }
    totals = {"gpus": 0, "allocated": 0, "free": 0, "TE": 0, "BE": 0, "preempting": 0, "lost": 0, "down": 0,
              "unhealthy": 0}
    holders: set[int] = set()
    for (node_id, index, model, healthy, unhealthy_reason, job_id, job_class,
         job_state) in Gpu.objects.order_by("node__name", "index").values_list(*_GPU_COLUMNS):
        node = nodes.get(node_id)
        if node is None:
            continue
        status = gpu_status(node["state"], job_state, job_class, healthy)
        if job_id is not None:
            holders.add(job_id)
        gpu = {"index": index, "model": model, "status": status, "job_id": job_id}
        if not healthy:  # only then: at 1,000 nodes each key of every GPU is 8,000 times in the page's state
            gpu.update(healthy=False, unhealthy_reason=unhealthy_reason)
        node["gpus"].append(gpu)
        node["total"] += 1
        totals["gpus"] += 1
        totals[status] = totals.get(status, 0) + 1
        if job_id is not None:
            totals["allocated"] += 1
        elif status == "free" and node["state"] == NodeState.UP:
            node["free"] += 1
    totals["free"] = sum(n["free"] for n in nodes.values())
    url = job_url_template()
    jobs = {str(row[0]): _brief(*row, url) for row in Job.objects.filter(pk__in=holders).values_list(*_HOLDER_COLUMNS)}
    for node in nodes.values():  # the model once per node when its GPUs share it (the usual node)
        models = {gpu["model"] for gpu in node["gpus"]}
        if len(models) == 1:
            node["model"] = models.pop()
            for gpu in node["gpus"]:
                del gpu["model"]
    return {
        "generated_at": iso(now),
        "nodes": list(nodes.values()),
        "jobs": jobs,
        "totals": totals,
        "queue": shared_queue(url),
        "utilization": utilization_series(now),
    }


def queue_by_class(user) -> dict:  # noqa: ANN001
    """The queue of ``shared_queue`` as ``user`` sees it."""
    return _queue_seen_by(shared_queue(), user)


def shared_queue(url: str | None = None) -> dict:
    """PENDING jobs per class in the order the scheduler considers them (``scheduler.core.queue_order``):
    the queue's head as the last forecast stored it (fair share, when on, reorders the queue), then
    jobs submitted since, by priority, submission time and id; by those alone while no head is stored.
    Each listed job carries its owner's id and forecast start (``_seen_by`` keeps what a viewer may see)."""
    out: dict[str, dict] = {}
    heads = forecast_store.read_heads()
    url = url or job_url_template()
    for job_class in CLASSES:
        pending = Job.objects.filter(state=JobState.PENDING, job_class=job_class)
        jobs = list(pending.select_related("owner").order_by("-priority", "submitted_at", "id")[:QUEUE_LIST_LIMIT])
        if heads.get(job_class):
            jobs = _head_first(jobs, heads[job_class], pending)
        reasons = dict(pending.order_by().values_list("pending_reason").annotate(n=Count("id")).values_list("pending_reason", "n"))
        forecasts = forecast_store.read(j.pk for j in jobs)
        out[job_class] = {
            "count": sum(reasons.values()),
            "by_reason": {(k or "none"): v for k, v in sorted(reasons.items())},
            "jobs": [
                {
                    **_brief(job.pk, job.name, job.owner_id, job.owner.username, job.job_class, job.state,
                             job.num_gpus, job.started_at, url),
                    "position": position,
                    "submitted_at": iso(job.submitted_at),
                    "reason": job.pending_reason,
                    "message": job.pending_message,
                    "forecast_start": _forecast_start(forecasts.get(job.pk)),
                }
                for position, job in enumerate(jobs, start=1)
            ],
        }
    return out


def _head_first(jobs: list[Job], head: list[int], pending) -> list[Job]:  # noqa: ANN001 - a queryset
    """``jobs`` (by priority and arrival) and the still pending jobs of ``head`` not among them, the
    head's in its order first, at most ``QUEUE_LIST_LIMIT``."""
    listed = {j.pk for j in jobs}
    missing = [pk for pk in head if pk not in listed]
    if missing:
        jobs = jobs + list(pending.select_related("owner").filter(pk__in=missing))
    rank = {pk: i for i, pk in enumerate(head)}
    after = len(head)
    order = {j.pk: i for i, j in enumerate(jobs)}  # the priority-and-arrival order among the rest
    return sorted(jobs, key=lambda j: (rank.get(j.pk, after), order[j.pk]))[:QUEUE_LIST_LIMIT]


def _forecast_start(stored: forecast_store.StoredForecast | None) -> str | None:
    return stored.as_json()["start"] if stored is not None else None


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
    # GPUs held through whole buckets, as differences (+ where they begin, - where they end): an attempt
    # running all hour costs two additions, not sixty (at 1,000 nodes the window holds thousands).
    through = {c: [0.0] * (buckets + 1) for c in CLASSES}
    attempts = Attempt.objects.filter(started_at__lt=now).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
    for started_at, ended_at, allocation, job_class in attempts.values_list(
            "started_at", "ended_at", "gpu_allocation", "job__job_class"):
        gpus = gpu_count(allocation)
        lo = max(started_at, start)
        hi = min(ended_at or now, now)
        if gpus == 0 or hi <= lo:
            continue
        a, b = (lo - start).total_seconds(), (hi - start).total_seconds()
        first, last = int(a // width), min(int(b // width), buckets - 1)
        if first == last:
            area[job_class][first] += gpus * (b - a)
            continue
        area[job_class][first] += gpus * ((first + 1) * width - a)
        area[job_class][last] += gpus * (b - last * width)
        through[job_class][first + 1] += gpus * width
        through[job_class][last] -= gpus * width
    for c in CLASSES:
        held = 0.0
        for i in range(buckets):
            held += through[c][i]
            area[c][i] += held
    cap = capacity * width
    return {
        "window_s": window_s,
        "capacity": capacity,
        "t": [iso(start + timedelta(seconds=(i + 0.5) * width)) for i in range(buckets)],
        **{c: [round(v / cap, 4) if cap else 0.0 for v in area[c]] for c in CLASSES},
    }

"""Step 1 of a scheduling cycle: read the database into the core's ``Snapshot``.

Only UP nodes are schedulable. A job holding GPUs (STARTING, RUNNING,
PREEMPTING, CANCELLING) becomes a ``RunningJob`` placed where its current
attempt runs; PREEMPTING and CANCELLING jobs are vacating (``preempting``), so
policies count their GPUs as still held and never pick them as victims. A job
touching a node that is not UP (draining, down) is left out of ``running``
and its GPUs there are simply not offered: the free map, built from the
``Gpu`` rows that the apply step allocates, is the truth about what is free.

Pending jobs come in submission order; a job a quota keeps waiting gets
``hold_reason = QuotaExceeded`` from ``scheduler.quotas`` with usage computed
once per cycle. Times are Unix epoch seconds.

Besides the snapshot, ``CycleInput`` carries what the apply step needs to
write conditionally and to build agent commands (``JobRow`` per job id).

Rows are read as ``values()`` dicts of the columns used, never as model
instances, in a fixed handful of queries: UP nodes, active jobs, their current
attempts, free GPUs per node, quota usage, pending jobs (for running and pending
jobs, their versions and then the rows that changed: ``scheduler.kept_rows``;
the rows and what is built from one: ``scheduler.snapshot_rows``), plus one query
per kind for the reconfiguration fields of jobs that declare a model.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.conf import settings
from django.db.models import Count, F

from cluster.models import Gpu, GpuPolicy, Node, NodeState
from scheduler import adaptive_jobs, coordination, dependencies, elastic, fair_usage, holds, idleness, images, measured, quotas
from scheduler.accounting import attempt_work_seconds
from scheduler.core.arrays import limit_message, throttled
from scheduler.core.decisions import Reason
from scheduler.core.model import JobClass, JobSpec, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.model import NodeCapacity
from scheduler.kept_rows import ACTIVE_ROWS, PENDING_ROWS, Entry
from scheduler.models import JobState
from scheduler.selectors import quota_usage
from scheduler.snapshot_rows import JobRow, Row, active_rows, epoch, job_row, pending_rows, spec_of

__all__ = ["CycleInput", "JobRow", "build", "epoch"]

log = logging.getLogger(__name__)

VACATING_STATES = frozenset({JobState.PREEMPTING, JobState.CANCELLING})


@dataclass(slots=True)
class CycleInput:
    """The snapshot handed to the policy and the rows the apply step writes against."""

    snapshot: Snapshot
    jobs: dict[str, JobRow]
    usage: quotas.UsageSnapshot
    now: datetime
    never_satisfied: dict[int, str] = field(default_factory=dict)
    """Pending jobs whose dependency can never be satisfied, with why: the loop cancels them."""


def _nodes() -> list[NodeCapacity]:
    return [
        NodeCapacity(name=name, gpus=gpus, cpus=cpus, mem_gb=mem_gb)
        for name, gpus, cpus, mem_gb in Node.objects.filter(state=NodeState.UP).order_by("name")
        .values_list("name", "gpus", "cpus", "mem_gb")
    ]


def _free_map(nodes: list[NodeCapacity], active: list[tuple[Row, Row]]) -> dict[str, tuple[int, float, float]]:
    """Free (GPUs, CPUs, GB) per UP node: unallocated GPU rows, capacity minus held shares."""
    names = {n.name for n in nodes}
    free_gpus = dict(
        # An unhealthy GPU (cluster/gpu_health.py) is never free: nothing is placed on it.
        Gpu.objects.filter(node__state=NodeState.UP, allocated_to__isnull=True, healthy=True,
                           index__lt=F("node__gpus"))
        .values_list("node__name")
        .annotate(n=Count("id"))
        .order_by()
    )
    cpus: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    for job, attempt in active:
        if not (job["num_cpus"] or job["mem_gb"]):
            continue  # holds no CPU or memory share anywhere
        for node, indices in (attempt["gpu_allocation"] or {}).items():
            if node in names and job["num_gpus"]:
                cpus[node] += job["num_cpus"] * len(indices) / job["num_gpus"]
                mem[node] += job["mem_gb"] * len(indices) / job["num_gpus"]
    return {
        n.name: (
            free_gpus.get(n.name, 0),
            n.cpus - cpus[n.name] if n.cpus > 0 else math.inf,
            n.mem_gb - mem[n.name] if n.mem_gb > 0 else math.inf,
        )
        for n in nodes
    }


def _idle_marks(active: list[tuple[Row, Row]], policy: tuple[float, float]) -> tuple[dict, dict]:
    """(idle since, warned at) by (job id, attempt) from ``scheduler.idleness``; none while reclaim is off."""
    if policy[0] <= 0 or not active:
        return {}, {}
    current = {(job["id"], att["number"]): set(att["gpu_allocation"] or {}) for job, att in active}
    return idleness.read(coordination.redis_client(), current)


def _idle_policy() -> tuple[float, float]:
    """(idle after, grace) seconds of the site's GpuPolicy; (0, 0), reclaim off, without one."""
    row = GpuPolicy.objects.filter(pk=1).values_list("idle_after_s", "idle_grace_s").first()
    return (float(row[0]), float(row[1])) if row else (0.0, 0.0)


def _held(job: Row, attempt: Row) -> tuple[Placement, JobSpec, dict] | None:
    """What a job holding GPUs is in every cycle until its rows change: its placement, its spec
    with its current allocation, and the plan/reconfiguration fields of a reconfigurable job;
    None (logged) when its attempt holds another number of GPUs than it asked for."""
    allocation = attempt["gpu_allocation"] or {}
    placement = Placement.of({node: len(indices) for node, indices in allocation.items()})
    if not elastic.gpu_count_ok(job, placement.num_gpus):
        log.error("job %s attempt %d holds %d GPUs, not %d; left out of the snapshot",
                  job["id"], attempt["number"], placement.num_gpus, job["num_gpus"])
        return None
    changes, reconfig = elastic.running_fields(job, attempt, placement.num_gpus)
    spec = spec_of(job)
    return placement, (replace(spec, **changes) if changes else spec), reconfig


_LEFT_OUT = ()


def _running(entry: Entry, up: set[str], now: datetime, overhead: float) -> RunningJob | None:
    job, attempt = entry.row
    held = entry.built
    if held is None:
        held = _held(job, attempt) or _LEFT_OUT
        if not (job["model"] or job["adaptive_app"]):
            entry.built = held  # built from the rows alone: kept with them
    if held is _LEFT_OUT:
        return None
    placement, spec, reconfig = held
    if not set(placement.nodes) <= up:
        return None  # on a node that is not schedulable: its GPUs there are simply not free
    vacating = job["state"] in VACATING_STATES
    notice = attempt["notice_at"] or (now if vacating else None)
    started = attempt["started_at"]
    fields = dict(
        spec=spec,
        placement=placement,
        attempt_start=started.timestamp(),
        first_start=job["first_started_s"] or started.timestamp(),
        progress=job["progress_seconds"] + attempt_work_seconds(started, now, attempt["number"], overhead),
        preemptions=job["preemption_count"],
        preempting=vacating,
        preempted_for=str(attempt["preempted_for"]) if attempt["preempted_for"] is not None else None,
        notice_time=epoch(notice),
    )
    fields.update(reconfig)  # a reconfiguring job is not vacating for a preemption
    return RunningJob(**fields)


def _pending(usage: quotas.UsageSnapshot, jobs: dict[str, JobRow], up: set[str],
             never: dict[int, str], active: list[tuple[Row, Row]]) -> list[PendingJob]:
    """PENDING jobs in submission order, each with the quota that holds it, if any (their
    ``JobRow`` go into ``jobs``); a job whose image was unavailable on every UP node is held
    with ImageUnavailable instead (its stored message says where and why), and a job whose
    dependency is not satisfied yet with Dependency (one whose dependency never can be goes
    into ``never``, held until the loop cancels it); an array task past its array's ``%N`` with
    JobArrayTaskLimit."""
    entries = PENDING_ROWS.current(pending_rows)
    rows = [e.row for e in entries]
    waiting, unsatisfiable, awaited = dependencies.evaluate(
        (job["id"], job["dependency"]) for job in rows if job["dependency"])
    never.update(unsatisfiable)
    limited = _throttled(rows, active)
    pending = []
    for entry in entries:
        job = entry.row
        if entry.job_row is None:
            entry.job_row = job_row(job)
        row = jobs[str(job["id"])] = entry.job_row
        hold = quotas.blocking_reason(row, usage) if usage.scopes_for(row.owner_id) else None
        if job["excluded_nodes"] and up and up <= set(job["excluded_nodes"]):
            hold = (Reason.IMAGE_UNAVAILABLE.value, images.held_message(job["excluded_nodes"]))
        if job["id"] in waiting or job["id"] in never:
            hold = (Reason.DEPENDENCY.value, waiting.get(job["id"]) or never[job["id"]])
        elif job["id"] in limited:
            hold = (Reason.JOB_ARRAY_TASK_LIMIT.value, limit_message(job["array_id"], job["array_max_running"]))
        if job["hold"]:  # a person's hold says most of why the job waits: it comes first
            hold = holds.reason_of(job["hold"], job["id"])
        spec = entry.built or spec_of(job)
        if entry.built is None and not (job["model"] or job["adaptive_app"]):
            entry.built = spec  # built from the row alone: kept with it
        if job["id"] in awaited:  # what a start-time forecast releases the job on (policies read the hold)
            spec = replace(spec, dependencies=awaited[job["id"]])
        pending.append(PendingJob(spec=spec, progress=job["progress_seconds"], preemptions=job["preemption_count"],
                                  first_start=job["first_started_s"], hold_reason=hold[0] if hold else None,
                                  hold_message=hold[1] if hold else ""))
    return pending


def _throttled(rows: list[Row], active: list[tuple[Row, Row]]) -> set[int]:
    """Pending array tasks that must wait for their array's ``%N`` (``scheduler.core.arrays.throttled``)."""
    limited = [(job["id"], job["array_id"], job["array_max_running"]) for job in rows if job["array_max_running"]]
    if not limited:
        return set()
    running: dict[int, int] = defaultdict(int)
    for job, _ in active:
        if job["array_max_running"]:
            running[job["array_id"]] += 1
    return throttled(limited, running)


def _with_measured_steps(running: list[RunningJob], pending: list[PendingJob]) -> None:
    """Reconfigurable jobs that report their steps and total (``scheduler.measured``) get them as
    ``JobSpec.steps`` and ``steps_done``, so Rubick weighs their remaining work as measured."""
    entries = [e for e in (*running, *pending) if e.spec.model]
    found = measured.steps(int(e.spec.id) for e in entries) if entries else {}
    for entry in entries:
        if int(entry.spec.id) in found:
            done, total = found[int(entry.spec.id)]
            entry.spec, entry.steps_done = replace(entry.spec, steps=total), done


def build(now: datetime) -> CycleInput:
    """Read the cluster as one cycle sees it at ``now`` (seven queries, the GPU policy's idle reclaim
    settings one of them; one more per kind of row when jobs declare a model, and one for their
    reported steps; two more with fair share on, for the tenants' shares and usage)."""
    overhead = settings.SCHEDULER_RESUME_OVERHEAD
    nodes = _nodes()
    up = {n.name for n in nodes}
    held = ACTIVE_ROWS.current(active_rows)
    active = [entry.row for entry in held]
    idle_policy = _idle_policy()
    idle, warned = _idle_marks(active, idle_policy)
    jobs: dict[str, JobRow] = {}
    running: list[RunningJob] = []
    for kept in held:
        job, attempt = kept.row
        if kept.job_row is None:
            kept.job_row = job_row(job, attempt["gpu_allocation"])
        jobs[str(job["id"])] = kept.job_row
        entry = _running(kept, up, now, overhead)
        if entry is not None:
            key = (job["id"], attempt["number"])
            entry.idle_since, entry.idle_warned_at = idle.get(key), warned.get(key)
            running.append(entry)
    usage = quota_usage(now=now)
    never: dict[int, str] = {}
    pending = _pending(usage, jobs, up, never, active)
    _with_measured_steps(running, pending)
    adaptive_jobs.with_measured_progress(running, pending, now)
    snapshot = Snapshot(nodes=nodes, running=running, pending=pending, free=_free_map(nodes, active),
                        pending_te=[p for p in pending if p.spec.job_class is JobClass.TE],
                        tenants=fair_usage.tenant_usage(now) if fair_usage.enabled() else None,
                        idle_after=idle_policy[0], idle_grace=idle_policy[1])
    return CycleInput(snapshot=snapshot, jobs=jobs, usage=usage, now=now, never_satisfied=never)

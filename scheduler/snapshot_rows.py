"""Job rows as a cycle reads them, and what the snapshot builds from one row.

Rows are read with ``values()``: building a model instance per row was most of a cycle at
10,000 jobs. ``pending_rows`` and ``active_rows`` are the readers of ``scheduler.kept_rows``:
given job ids (or None: every job in their states) they return each job's row, by id.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import F, FloatField, Func, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from scheduler import adaptive_jobs, elastic
from scheduler.bulkwrite import id_set
from scheduler.kept_rows import row_version
from scheduler.core.model import JobClass, JobSpec
from scheduler.models import ACTIVE_STATES, Attempt, Job, JobState

log = logging.getLogger("scheduler.snapshot")


@dataclass(slots=True)
class JobRow:
    """What the apply step knows of a job as read for this cycle (nothing changes it after the read;
    not a frozen dataclass, whose construction cost three times as much: a cycle at 5,000 nodes
    builds 60,000).

    ``state`` and ``attempt_count`` are the values every conditional write
    expects; ``allocation`` is the current attempt's ``{node: [gpu indices]}``
    (empty for a pending job). ``owner_id``, ``job_class``, ``num_gpus`` and
    ``time_limit`` make it a ``scheduler.quotas.JobLike``. ``plan`` and
    ``target_gpus`` (and ``adaptive``) tell the apply step which starts launch
    with a plan (``scheduler.reconfigure.record_start``).

    Not the command (up to 16 KiB): the start step reads it for the jobs it
    launches (``scheduler.starts_and_preemptions``), instead of every cycle
    reading it, and the worker keeping it, for every waiting job.
    """

    pk: int
    state: str
    attempt_count: int
    owner_id: int
    job_class: str
    num_gpus: int
    time_limit: int | None
    grace_period: int
    pending_reason: str = ""
    pending_message: str = ""
    allocation: dict[str, list[int]] = field(default_factory=dict)
    plan: str = ""
    target_gpus: int = 0
    adaptive: bool = False


def epoch(when: datetime | None) -> float | None:
    return None if when is None else when.timestamp()


Row = dict[str, Any]
"""One job's (or attempt's) ``values()`` dict."""

#: Job columns every cycle reads; a job with a ``model`` also gets ``elastic.SPEC_FIELDS``. Its two times
#: come as seconds since the epoch (``submitted_s``, ``first_started_s``) and ``excluded_nodes`` as a list
#: or None (``job_rows``).
JOB_COLUMNS = (
    "id", "state", "attempt_count", "owner_id", "job_class", "num_gpus", "num_cpus", "mem_gb", "grace_period",
    "priority", "time_limit", "progress_seconds",
    "preemption_count", "pending_reason", "pending_message", "model", "plan", "target_gpus",
    "project__name", "dependency", "array_id", "array_max_running", "adaptive_app", "hold",
)


def job_rows(jobs: QuerySet, versioned: bool = False) -> list[Row]:
    """``values(*JOB_COLUMNS)`` of ``jobs`` with the times in seconds and ``excluded_nodes`` (None when empty);
    ``versioned``: with ``row_version``, the version of the job's and its project's rows (``scheduler.kept_rows``).

    At 50,000 pending jobs the read was a third of the cycle, most of it building a
    datetime for each time and decoding the JSON of each ``excluded_nodes`` (almost
    always empty). PostgreSQL gives the times as seconds (``EXTRACT(EPOCH ...)``, the
    same float as ``datetime.timestamp()``) and the list as text, decoded only when not empty.
    """
    postgres = connection.vendor == "postgresql"
    times = {f"{name[:-3]}_s": _seconds_since_epoch(name) if postgres else F(name)
             for name in ("submitted_at", "first_started_at")}
    if versioned:  # the project's table is joined under its own name for ``project__name``
        times["row_version"] = RawSQL(row_version(f'"{Job._meta.db_table}"', f'"{_PROJECT_TABLE}"'), ())
    rows = list(jobs.annotate(excluded_text=Cast("excluded_nodes", TextField()), **times)
                .values(*JOB_COLUMNS, "excluded_text", *times))
    for row in rows:
        text = row.pop("excluded_text")
        row["excluded_nodes"] = json.loads(text) if text and text != "[]" else None
        if not postgres:
            row["submitted_s"], row["first_started_s"] = epoch(row["submitted_s"]), epoch(row["first_started_s"])
    return rows


def _seconds_since_epoch(name: str) -> Func:
    return Func(F(name), template="EXTRACT(EPOCH FROM %(expressions)s)::double precision", output_field=FloatField())
#: Columns of a job's current attempt.
ATTEMPT_COLUMNS = tuple(dict.fromkeys(
    ("job_id", "number", "gpu_allocation", "started_at", "notice_at", "preempted_for") + elastic.ATTEMPT_FIELDS))


_JOB_CLASSES = {c.value: c for c in JobClass}


def spec_of(job: Row) -> JobSpec:
    """The core's view of a job; its tenant is its project's name ("" for none)."""
    spec = JobSpec(
        id=str(job["id"]),
        job_class=_JOB_CLASSES[job["job_class"]],
        num_gpus=job["num_gpus"],
        submit_time=job["submitted_s"],
        num_cpus=job["num_cpus"],
        mem_gb=job["mem_gb"],
        grace_period=float(job["grace_period"]),
        priority=job["priority"],
        user=str(job["owner_id"]),
        tenant=job["project__name"] or "",
        time_limit=float(job["time_limit"]) if job["time_limit"] is not None else None,
        excluded_nodes=frozenset(job["excluded_nodes"] or ()),  # its image was unavailable there (scheduler.images)
        array_id=str(job["array_id"]) if job["array_max_running"] else "",  # for forecasts: the snapshot holds %N
        array_limit=job["array_max_running"] or 0,
    )
    if job["adaptive_app"]:
        return replace(spec, **adaptive_jobs.spec_fields(job))
    if not job["model"]:
        return spec  # not reconfigurable: nothing more to read (most jobs)
    reconfig = elastic.spec_fields(job)  # may also pin num_gpus/num_cpus/mem_gb to a decided target
    return replace(spec, **reconfig) if reconfig else spec


# --- reconfigurable jobs (scheduler/elastic.py reads the fields it names in
# elastic.SPEC_FIELDS and elastic.ATTEMPT_FIELDS, from objects or values() dicts)


def with_reconfig_fields(jobs: list[Row]) -> list[Row]:
    """Add ``elastic.SPEC_FIELDS`` to the rows of jobs that declare a model or a profile (one more
    query, only when there are such jobs: most jobs declare none and their rows stay small)."""
    declared = {job["id"]: job for job in jobs if job["model"] or job["adaptive_app"]}
    if declared:
        for extra in Job.objects.filter(pk__in=declared).values("id", *elastic.SPEC_FIELDS):
            declared[extra["id"]].update(extra)
    return jobs


def job_row(job: Row, allocation: dict[str, list[int]] | None = None) -> JobRow:
    return JobRow(
        pk=job["id"], state=job["state"], attempt_count=job["attempt_count"], owner_id=job["owner_id"],
        job_class=job["job_class"], num_gpus=job["num_gpus"], time_limit=job["time_limit"],
        grace_period=job["grace_period"], pending_reason=job["pending_reason"],
        pending_message=job["pending_message"], allocation=allocation or {}, plan=job["plan"],
        target_gpus=job["target_gpus"], adaptive=bool(job["adaptive_app"]),
    )


_PROJECT_TABLE = Job._meta.get_field("project").related_model._meta.db_table


def pending_rows(ids: list[int] | None, versioned: bool = False) -> dict[int, tuple[str, Row]]:
    """``(version, row)`` of the PENDING jobs among ``ids`` (None: of every PENDING job, in
    submission order), by id (``scheduler.kept_rows.Reader``)."""
    jobs = Job.objects.filter(state=JobState.PENDING)
    jobs = jobs.order_by("submitted_at", "id") if ids is None else jobs.filter(pk__in=id_set(ids)).order_by()
    return {row["id"]: (row.pop("row_version", ""), row) for row in with_reconfig_fields(job_rows(jobs, versioned))}


def active_rows(ids: list[int] | None, versioned: bool = False) -> dict[int, tuple[str, tuple[Row, Row]]]:
    """``(version, (job, current attempt))`` of the jobs holding GPUs among ``ids`` (None: every
    one, in id order), by id; the current attempt is the one numbered ``attempt_count``, and a job
    without it is logged and left out (``scheduler.kept_rows.Reader``)."""
    jobs = Job.objects.filter(state__in=ACTIVE_STATES)
    attempts = Attempt.objects.filter(job__state__in=ACTIVE_STATES, number=F("job__attempt_count"))
    if ids is None:
        jobs = jobs.order_by("id")
    else:
        jobs, attempts = jobs.filter(pk__in=id_set(ids)).order_by(), attempts.filter(job_id__in=id_set(ids))
    if versioned:
        attempts = attempts.annotate(row_version=RawSQL(row_version(f'"{Attempt._meta.db_table}"'), ()))
    current = {a["job_id"]: a for a in attempts.order_by().values(*ATTEMPT_COLUMNS, *(("row_version",) if versioned else ()))}
    pairs = {}
    for job in with_reconfig_fields(job_rows(jobs, versioned)):
        attempt = current.get(job["id"])
        if attempt is None or attempt["number"] != job["attempt_count"]:
            log.error("job %s is %s but has no attempt %d; left out of the snapshot",
                      job["id"], job["state"], job["attempt_count"])
            continue
        version = f'{job.pop("row_version")}/{attempt.pop("row_version")}' if versioned else ""
        pairs[job["id"]] = (version, (job, attempt))
    return pairs

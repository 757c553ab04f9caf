"""Usage reports: GPU-hours, jobs, preemptions and lost GPU-hours by project or user and class
over a period, with a time series for charts and the quotas beside (reads only).

What counts in a period ``[from, to)``:

* **GPU-hours**: GPUs of each attempt times the part of its run inside the
  period (an attempt still running counts up to now);
* **jobs**: jobs submitted in the period;
* **preemptions**: attempts preempted (ended ``PREEMPTED``) in the period;
* **lost GPU-hours**: work the attempts that ended in the period lost
  (``Attempt.lost_gpu_seconds``: not kept by a checkpoint).

Who sees what: staff see every job; any other user sees the jobs charged to
the projects they belong to and their own jobs (charged to no project, or to
a project they have since left). Grouped ``by`` project (``(none)`` for jobs
charged to no project) or by user, and by job class.

The series splits the GPU-hours into buckets (an hour for periods up to two
days, a day up to 62 days, a week beyond) for a stacked area chart. Buckets
are calendar ones in UTC (hours on the hour, days from midnight, weeks from
Monday), as ``sreport`` counts: a period that starts mid-day has a first
bucket that starts with it and a last one cut at its end, so a day's usage
is drawn on that day, whatever the hour the report was asked for.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone as dt_timezone
from typing import Mapping

from django.db import connection, transaction
from django.db.models import Count, F, FloatField, IntegerField, Q, Sum
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from scheduler.models import Attempt, AttemptState, Job, Quota
from scheduler.projects import Membership, Project
from scheduler.selectors import quota_report

BY = ("project", "user")
#: Longest period one report covers.
MAX_PERIOD_DAYS = 400
#: The name of the group of jobs charged to no project.
NO_PROJECT = "(none)"
DEFAULT_PERIOD = timedelta(days=7)


class UsageQueryInvalid(Exception):
    """The query breaks a rule; ``errors`` maps the parameter (``from``, ``to``, ``by``) to messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class UsageQuery:
    start: datetime
    end: datetime
    by: str = "project"


def parse_instant(text: str, end_of_day: bool) -> datetime | None:
    """An ISO date (``2026-12-01``: its midnight, or the next midnight for ``end_of_day``) or an ISO
    date-time (naive: UTC); None when ``text`` is neither."""
    try:
        day = parse_date(text)  # first: a date alone would also parse as a date-time at midnight
        moment = None if day is not None else parse_datetime(text)
    except ValueError:  # well formed but impossible, like 2026-02-30
        return None
    if moment is None and day is None:
        return None
    if moment is None:
        moment = datetime.combine(day + timedelta(days=1) if end_of_day else day, time(), dt_timezone.utc)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt_timezone.utc)


def parse_query(params: Mapping[str, str], now: datetime | None = None) -> UsageQuery:
    """The query of ``from``, ``to`` (ISO dates or date-times; a date ``to`` includes that day) and
    ``by``; defaults: the 7 days up to now, by project. Raises ``UsageQueryInvalid`` naming the field."""
    now = now or timezone.now()
    errors: dict[str, list[str]] = {}
    parsed: dict[str, datetime | None] = {}
    for name, end_of_day in (("from", False), ("to", True)):
        text = (params.get(name) or "").strip()
        parsed[name] = parse_instant(text, end_of_day) if text else None
        if text and parsed[name] is None:
            errors[name] = [f"{text[:40]!r} is not a date (YYYY-MM-DD) or an ISO date-time."]
    by = (params.get("by") or "project").strip()
    if by not in BY:
        errors["by"] = [f"{by[:40]!r} is not one of: {', '.join(BY)}."]
    if errors:
        raise UsageQueryInvalid(errors)
    end = parsed["to"] or now
    start = parsed["from"] or end - DEFAULT_PERIOD
    if start >= end:
        raise UsageQueryInvalid({"to": ["Must be after from."]})
    if end - start > timedelta(days=MAX_PERIOD_DAYS):
        raise UsageQueryInvalid({"from": [f"A report covers at most {MAX_PERIOD_DAYS} days."]})
    return UsageQuery(start, end, by)


def _visible(viewer, prefix: str = "") -> Q:  # noqa: ANN001 - a user model instance
    """Rows the viewer may count (module doc); ``prefix`` leads to the job (``job__`` for attempts)."""
    if viewer.is_staff:
        return Q()
    projects = list(Membership.objects.filter(user_id=viewer.pk).values_list("project_id", flat=True))
    return Q(**{f"{prefix}project_id__in": projects}) | Q(**{f"{prefix}owner_id": viewer.pk})


def bucket_seconds(start: datetime, end: datetime) -> int:
    """The series' bucket for a period: an hour up to two days, a day up to 62 days, else a week."""
    span = (end - start).total_seconds()
    return 3600 if span <= 2 * 86400 else 86400 if span <= 62 * 86400 else 7 * 86400


#: Seconds from the epoch's Thursday to the Monday weeks start on.
_WEEK_OFFSET = 4 * 86400


def bucket_floor(t: float, step: int) -> float:
    """The start (epoch seconds, UTC) of the calendar bucket of ``step`` seconds that holds ``t``."""
    offset = _WEEK_OFFSET if step == 7 * 86400 else 0
    return (t - offset) // step * step + offset


#: GPUs an attempt holds, from its allocation (``{node: [indices]}``), as ``gpu_allocation.gpu_count``: the
#: length of every node's list of indices gathered into one (a subquery over ``jsonb_each`` per attempt
#: cost five times as much).
_GPUS_SQL = "jsonb_array_length(jsonb_path_query_array(scheduler_attempt.gpu_allocation, '$.*[*]'))"
#: Epoch seconds of an attempt's part inside the period: from max(start, from) ...
_FROM_SQL = "EXTRACT(EPOCH FROM GREATEST(scheduler_attempt.started_at, %s))::float8"
#: ... to min(end or now, to, now).
_TO_SQL = "EXTRACT(EPOCH FROM LEAST(COALESCE(scheduler_attempt.ended_at, %s), %s, %s))::float8"


def _held(viewer, query: UsageQuery, name_of: str):  # noqa: ANN001, ANN202 - a queryset
    """The attempts that ran in the period and the viewer may see, with ``name`` and ``cls`` (job class)."""
    return (Attempt.objects.filter(_visible(viewer, "job__"), started_at__lt=query.end)
            .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=query.start))
            .annotate(name=F(f"job__{name_of}"), cls=F("job__job_class")))


def report(viewer, query: UsageQuery, now: datetime | None = None) -> dict:  # noqa: ANN001
    """The report of ``query`` as ``viewer`` may see it (module doc): ``rows`` per (name, class),
    ``totals``, ``series`` (bucket starts and GPU-hours per name and bucket), ``beside`` (each
    project's share, or each user's own quota) and the viewer's ``quota`` (GET /api/v1/quota/).

    Summed by PostgreSQL: a year of a busy cluster is hundreds of thousands of attempts, which read
    one by one into Python took seconds."""
    now = now or timezone.now()
    name_of = "project__name" if query.by == "project" else "owner__username"
    step = bucket_seconds(query.start, query.end)
    t0, t1 = query.start.timestamp(), query.end.timestamp()
    base = bucket_floor(t0, step)
    buckets = max(1, -int(-(t1 - base) // step))
    held = _held(viewer, query, name_of)
    with transaction.atomic():
        with connection.cursor() as cursor:  # compiling these scans costs more than it saves
            cursor.execute("SET LOCAL jit = off")
        ended = held.values("name", "cls").annotate(
            preemptions=Count("pk", filter=Q(ended_at__gte=query.start, ended_at__lt=query.end,
                                             state=AttemptState.PREEMPTED)),
            lost=Sum("lost_gpu_seconds", filter=Q(ended_at__gte=query.start, ended_at__lt=query.end)),
        ).values_list("name", "cls", "preemptions", "lost").order_by()
        cells = {(name or NO_PROJECT, cls): (preemptions, lost or 0.0) for name, cls, preemptions, lost in ended}
        jobs = {(name or NO_PROJECT, cls): n for name, cls, n in Job.objects.filter(
            _visible(viewer), submitted_at__gte=query.start, submitted_at__lt=query.end)
            .values(name_of, "job_class").annotate(n=Count("pk")).values_list(name_of, "job_class", "n").order_by()}
        pieces = _pieces(held, query, now, base, step, buckets)
    series: dict[str, list[float]] = {}
    gpu_hours: dict[tuple[str, str], float] = {}
    for (name, cls, bucket), hours in sorted(pieces.items()):
        series.setdefault(name, [0.0] * buckets)[bucket] += hours
        gpu_hours[(name, cls)] = gpu_hours.get((name, cls), 0.0) + hours
    rows = []
    for name, cls in sorted(set(cells) | set(jobs)):
        preemptions, lost = cells.get((name, cls), (0, 0.0))
        rows.append({query.by: name, "job_class": cls, "gpu_hours": round(gpu_hours.get((name, cls), 0.0), 4),
                     "jobs": jobs.get((name, cls), 0), "preemptions": preemptions,
                     "lost_gpu_hours": round(lost / 3600, 4)})
    names = sorted({name for name, _ in cells} | {name for name, _ in jobs})
    return {
        "from": query.start.isoformat(), "to": query.end.isoformat(), "by": query.by, "bucket_seconds": step,
        "rows": rows,
        "totals": {k: round(sum(r[k] for r in rows), 4) for k in ("gpu_hours", "jobs", "preemptions",
                                                                   "lost_gpu_hours")},
        "series": {"buckets": [datetime.fromtimestamp(max(base + i * step, t0), dt_timezone.utc).isoformat()
                               for i in range(buckets)],
                   "gpu_hours": {n: [round(v, 4) for v in series.get(n, [0.0] * buckets)] for n in names}},
        "beside": _beside(query.by, names),
        "quota": quota_report(viewer),
    }


#: GPUs an attempt holds, from its allocation (``{node: [indices]}``), as ``gpu_allocation.gpu_count``: the
#: length of every node's list of indices gathered into one (a subquery over ``jsonb_each`` per attempt
#: cost five times as much).
_GPUS_SQL = "jsonb_array_length(jsonb_path_query_array(scheduler_attempt.gpu_allocation, '$.*[*]'))"
#: Epoch seconds of an attempt's part inside the period: from max(start, from) ...
_FROM_SQL = "EXTRACT(EPOCH FROM GREATEST(scheduler_attempt.started_at, %s))::float8"
#: ... to min(end or now, to, now).
_TO_SQL = "EXTRACT(EPOCH FROM LEAST(COALESCE(scheduler_attempt.ended_at, %s), %s, %s))::float8"
#: Each attempt's GPU-hours split over the buckets it overlaps (``%s``: the attempts), summed per name,
#: class and bucket.
_PIECES_SQL = ("SELECT a.name, a.cls, b, SUM(a.gpus * (LEAST(a.e - %s, (b + 1) * %s) - GREATEST(a.s - %s, b * %s))) "
               "/ 3600.0 FROM ({attempts}) AS a CROSS JOIN LATERAL generate_series(FLOOR((a.s - %s) / %s)::int, "
               "LEAST(CEIL((a.e - %s) / %s)::int - 1, %s)) AS b GROUP BY a.name, a.cls, b")


def _pieces(held, query: UsageQuery, now: datetime, base: float, step: int,  # noqa: ANN001 - a queryset
            buckets: int) -> dict[tuple[str, str, int], float]:
    """GPU-hours per (name, class, bucket): each attempt's part in the period, ``gpus x (e - s)``,
    split over the buckets of ``step`` seconds from ``base`` (epoch seconds) it overlaps."""
    spans = held.annotate(gpus=RawSQL(_GPUS_SQL, (), output_field=IntegerField()),
                          s=RawSQL(_FROM_SQL, (query.start,), output_field=FloatField()),
                          e=RawSQL(_TO_SQL, (now, query.end, now), output_field=FloatField()))
    inner, params = spans.filter(e__gt=F("s"), gpus__gt=0).values_list("name", "cls", "gpus", "s", "e") \
        .order_by().query.sql_with_params()  # no ORDER BY: the model's would sort every attempt for nothing
    with connection.cursor() as cursor:
        cursor.execute(_PIECES_SQL.format(attempts=inner),
                       (base, step, base, step, *params, base, step, base, step, buckets - 1))
        return {(name or NO_PROJECT, cls, bucket): hours for name, cls, bucket, hours in cursor.fetchall()}


def _beside(by: str, names: list[str]) -> dict[str, dict]:
    """What is configured for each name: a project's share, or a user's own quota limits."""
    if by == "project":
        shares = dict(Project.objects.filter(name__in=names).values_list("name", "share"))
        return {n: {"share": shares[n]} for n in names if n in shares}
    quotas = Quota.objects.filter(user__username__in=names).values_list(
        "user__username", "gpu_hours_budget", "budget_period_days", "max_gpus")
    return {n: {"gpu_hours_budget": b, "budget_period_days": d, "max_gpus": g} for n, b, d, g in quotas}


CSV_COLUMNS = ("job_class", "gpu_hours", "jobs", "preemptions", "lost_gpu_hours")


def as_csv(data: dict) -> str:
    """The report's rows as CSV: a header (``project`` or ``user``, then ``CSV_COLUMNS``), one line per row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow((data["by"], *CSV_COLUMNS))
    for row in data["rows"]:
        writer.writerow((_cell_text(row[data["by"]]), *(row[k] for k in CSV_COLUMNS)))
    return out.getvalue()


def _cell_text(value: str) -> str:
    """A name as a spreadsheet may show it: never a formula (a leading =, +, - or @ is quoted away)."""
    return "'" + value if value[:1] in ("=", "+", "-", "@") else value


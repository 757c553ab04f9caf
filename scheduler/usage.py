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

from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from scheduler.gpu_allocation import gpu_count
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


def _instant(text: str, end_of_day: bool) -> datetime | None:
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
        parsed[name] = _instant(text, end_of_day) if text else None
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


@dataclass(slots=True)
class _Cell:
    gpu_hours: float = 0.0
    jobs: int = 0
    preemptions: int = 0
    lost_gpu_hours: float = 0.0


def report(viewer, query: UsageQuery, now: datetime | None = None) -> dict:  # noqa: ANN001
    """The report of ``query`` as ``viewer`` may see it (module doc): ``rows`` per (name, class),
    ``totals``, ``series`` (bucket starts and GPU-hours per name and bucket), ``beside`` (each
    project's share, or each user's own quota) and the viewer's ``quota`` (GET /api/v1/quota/)."""
    now = now or timezone.now()
    name_of = "project__name" if query.by == "project" else "owner__username"
    step = bucket_seconds(query.start, query.end)
    t0, t1 = query.start.timestamp(), query.end.timestamp()
    base = bucket_floor(t0, step)
    buckets = max(1, -int(-(t1 - base) // step))
    cells: dict[tuple[str, str], _Cell] = {}
    series: dict[str, list[float]] = {}

    def cell(name: str | None, job_class: str) -> _Cell:
        return cells.setdefault((name or NO_PROJECT, job_class), _Cell())

    attempts = (Attempt.objects.filter(_visible(viewer, "job__"), started_at__lt=query.end)
                .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=query.start))
                .values_list(f"job__{name_of}", "job__job_class", "gpu_allocation", "started_at", "ended_at",
                             "state", "lost_gpu_seconds").order_by())
    for name, job_class, allocation, started, ended, state, lost in attempts:
        gpus = gpu_count(allocation)
        s = max(started.timestamp(), t0)
        e = min((ended or now).timestamp(), t1, now.timestamp())
        c = cell(name, job_class)
        if e > s and gpus:
            c.gpu_hours += gpus * (e - s) / 3600
            _spread(series.setdefault(name or NO_PROJECT, [0.0] * buckets), gpus, s - base, e - base, step)
        if ended is not None and query.start <= ended < query.end:
            c.preemptions += state == AttemptState.PREEMPTED
            c.lost_gpu_hours += (lost or 0.0) / 3600
    submitted = (Job.objects.filter(_visible(viewer), submitted_at__gte=query.start, submitted_at__lt=query.end)
                 .values_list(name_of, "job_class").order_by())
    for name, job_class in submitted:
        cell(name, job_class).jobs += 1
    rows = [{query.by: name, "job_class": job_class, "gpu_hours": round(c.gpu_hours, 4), "jobs": c.jobs,
             "preemptions": c.preemptions, "lost_gpu_hours": round(c.lost_gpu_hours, 4)}
            for (name, job_class), c in sorted(cells.items())]
    names = sorted({name for name, _ in cells})
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


def _spread(values: list[float], gpus: int, s: float, e: float, step: int) -> None:
    """Add ``gpus`` GPU-hours per hour held from ``s`` to ``e`` (seconds after the first bucket's
    calendar start) to the buckets."""
    i = int(s // step)
    while s < e and i < len(values):
        edge = min(e, (i + 1) * step)
        values[i] += gpus * (edge - s) / 3600
        s, i = edge, i + 1


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


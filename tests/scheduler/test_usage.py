"""Usage reports: what counts in a period, grouped by project or user and class, who sees what,
the series for the chart, the CSV, and bad queries refused naming the parameter."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone as dt_timezone

import pytest

from scheduler.models import Attempt, AttemptState, Job, JobState, Quota
from scheduler.projects import Membership, Project
from scheduler.usage import NO_PROJECT, UsageQuery, UsageQueryInvalid, as_csv, parse_query, report

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 2, tzinfo=dt_timezone.utc)
NOW = T0 + timedelta(days=3)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def run(owner, project, gpus: int, start_h: float, end_h: float | None, *, job_class: str = "BE",  # noqa: ANN001
        state: str = AttemptState.COMPLETED, lost: float | None = None, submitted_h: float | None = None) -> Job:
    job = Job.objects.create(owner=owner, project=project, name="j", command="x", num_gpus=gpus, job_class=job_class,
                             state=JobState.COMPLETED if end_h is not None else JobState.RUNNING,
                             submitted_at=at(start_h if submitted_h is None else submitted_h))
    Attempt.objects.create(job=job, number=1, gpu_allocation={"n1": list(range(gpus))}, state=state,
                           started_at=at(start_h), ended_at=None if end_h is None else at(end_h),
                           lost_gpu_seconds=lost)
    return job


@pytest.fixture
def world(roles):  # noqa: ANN001, ANN201
    """vision (alice = owner, bob = other), nlp (nobody of the roles); jobs of each, and one of no project."""
    vision, nlp = Project.objects.create(name="vision", share=2.0), Project.objects.create(name="nlp")
    Membership.objects.create(project=vision, user=roles.owner)
    Membership.objects.create(project=vision, user=roles.other)
    from django.contrib.auth.models import User
    dana = User.objects.create_user("dana")
    Membership.objects.create(project=nlp, user=dana)
    run(roles.owner, vision, 2, 1, 3)                                   # 4 GPU-h
    run(roles.other, vision, 1, 2, 4, state=AttemptState.PREEMPTED, lost=1800)  # 2 GPU-h, preempted, 0.5 lost
    run(roles.owner, vision, 1, 5, 6, job_class="TE")                   # 1 GPU-h TE
    run(dana, nlp, 4, 0, 10)                                            # 40 GPU-h
    run(roles.owner, None, 1, 20, None)                                 # still running: up to NOW
    run(dana, nlp, 8, -48, -24)                                         # before the period
    return vision, nlp, dana


QUERY = UsageQuery(T0, T0 + timedelta(days=2), "project")


def test_staff_see_every_project_with_gpu_hours_jobs_preemptions_and_loss(roles, world):
    data = report(roles.staff, QUERY, now=NOW)
    rows = {(r["project"], r["job_class"]): r for r in data["rows"]}
    assert set(rows) == {("vision", "BE"), ("vision", "TE"), ("nlp", "BE"), (NO_PROJECT, "BE")}
    assert rows[("vision", "BE")] == {"project": "vision", "job_class": "BE", "gpu_hours": 6.0, "jobs": 2,
                                      "preemptions": 1, "lost_gpu_hours": 0.5}
    assert rows[("vision", "TE")]["gpu_hours"] == 1.0
    assert rows[("nlp", "BE")]["gpu_hours"] == 40.0 and rows[("nlp", "BE")]["jobs"] == 1
    assert rows[(NO_PROJECT, "BE")]["gpu_hours"] == 28.0  # from hour 20 to the period's end at 48
    assert data["totals"]["gpu_hours"] == 75.0 and data["totals"]["jobs"] == 5
    assert data["beside"] == {"vision": {"share": 2.0}, "nlp": {"share": 1.0}}


def test_a_member_sees_only_their_projects_and_their_own_jobs(roles, world):
    seen = {r["project"] for r in report(roles.owner, QUERY, now=NOW)["rows"]}
    assert seen == {"vision", NO_PROJECT}
    other = {r["project"] for r in report(roles.other, QUERY, now=NOW)["rows"]}
    assert other == {"vision"}  # alice's job of no project is hers alone
    dana = world[2]
    assert {r["project"] for r in report(dana, QUERY, now=NOW)["rows"]} == {"nlp"}


def test_by_user_with_each_users_budget_beside(roles, world):
    Quota.objects.create(user=roles.owner, gpu_hours_budget=100, budget_period_days=7)
    data = report(roles.owner, UsageQuery(QUERY.start, QUERY.end, "user"), now=NOW)
    hours = {(r["user"], r["job_class"]): r["gpu_hours"] for r in data["rows"]}
    assert hours == {("alice", "BE"): 32.0, ("alice", "TE"): 1.0, ("bob", "BE"): 2.0}
    assert data["beside"]["alice"]["gpu_hours_budget"] == 100
    assert data["quota"]["limits"]["gpu_hours_budget"] == 100


def test_the_series_adds_up_to_the_table_in_hourly_buckets(roles, world):
    data = report(roles.staff, QUERY, now=NOW)
    assert data["bucket_seconds"] == 3600 and len(data["series"]["buckets"]) == 48
    assert data["series"]["buckets"][0] == T0.isoformat()
    for name, values in data["series"]["gpu_hours"].items():
        assert sum(values) == pytest.approx(sum(r["gpu_hours"] for r in data["rows"] if r["project"] == name))
    assert data["series"]["gpu_hours"]["vision"][2] == 3.0  # hour 2-3: alice's 2 GPUs and bob's 1


def test_buckets_are_calendar_days_whatever_the_hour_the_period_starts(roles, world):
    """Seven days from 05:03 (the page's default at that time of day): eight day buckets, the first from
    05:03, the others from midnight; usage on the period's last morning is on its last day."""
    start = T0 + timedelta(days=-5, hours=5, minutes=3)
    data = report(roles.staff, UsageQuery(start, start + timedelta(days=7), "project"), now=NOW)
    buckets = data["series"]["buckets"]
    assert data["bucket_seconds"] == 86400 and len(buckets) == 8
    assert buckets[0] == start.isoformat() and buckets[1] == (T0 - timedelta(days=4)).isoformat()
    assert buckets[-1] == (T0 + timedelta(days=2)).isoformat()
    # dana's 8 GPUs the whole day two days before T0, and 4 GPUs for hours 0-10 of T0's day.
    assert data["series"]["gpu_hours"]["nlp"] == [0.0, 0.0, 0.0, 192.0, 0.0, 40.0, 0.0, 0.0]
    for name, values in data["series"]["gpu_hours"].items():
        assert sum(values) == pytest.approx(sum(r["gpu_hours"] for r in data["rows"] if r["project"] == name))


def test_weekly_buckets_start_on_monday(roles, world):
    from scheduler.usage import bucket_floor

    monday = datetime(2026, 11, 30, tzinfo=dt_timezone.utc)
    assert monday.weekday() == 0
    for later in (timedelta(0), timedelta(days=3, hours=7), timedelta(days=6, hours=23)):
        assert bucket_floor((monday + later).timestamp(), 7 * 86400) == monday.timestamp()


def test_a_period_with_nothing_is_empty(roles, world):
    data = report(roles.staff, UsageQuery(at(-200), at(-100), "project"), now=NOW)
    assert data["rows"] == [] and data["totals"]["gpu_hours"] == 0


def test_csv_has_a_header_one_line_per_row_and_no_formulas(roles, world):
    data = report(roles.staff, QUERY, now=NOW)
    lines = as_csv(data).splitlines()
    assert lines[0] == "project,job_class,gpu_hours,jobs,preemptions,lost_gpu_hours"
    assert "vision,BE,6.0,2,1,0.5" in lines and len(lines) == 1 + len(data["rows"])
    assert as_csv({"by": "user", "rows": [{"user": "=cmd()", "job_class": "BE", "gpu_hours": 1, "jobs": 0,
                                           "preemptions": 0, "lost_gpu_hours": 0}]}).splitlines()[1].startswith("'=")


def test_parse_query_defaults_and_inclusive_dates():
    now = datetime(2026, 12, 3, 12, tzinfo=dt_timezone.utc)
    q = parse_query({}, now)
    assert (q.start, q.end, q.by) == (now - timedelta(days=7), now, "project")
    q = parse_query({"from": "2026-12-01", "to": "2026-12-01", "by": "user"}, now)
    assert (q.start, q.end, q.by) == (datetime(2026, 12, 1, tzinfo=dt_timezone.utc),
                                      datetime(2026, 12, 2, tzinfo=dt_timezone.utc), "user")
    assert parse_query({"from": "2026-12-01T06:00:00"}, now).start.hour == 6


@pytest.mark.parametrize("params, field", [
    ({"from": "yesterday"}, "from"),
    ({"to": "2026-02-30"}, "to"),
    ({"by": "class"}, "by"),
    ({"by": "'; DROP TABLE scheduler_job; --"}, "by"),
    ({"from": "2026-12-02", "to": "2026-12-01"}, "to"),
    ({"from": "2020-01-01", "to": "2026-12-01"}, "from"),
])
def test_bad_queries_name_the_parameter(params, field):
    with pytest.raises(UsageQueryInvalid) as caught:
        parse_query(params, datetime(2026, 12, 3, tzinfo=dt_timezone.utc))
    assert list(caught.value.errors) == [field]


@pytest.mark.parametrize("days", [1, 20, 90])  # hourly, daily and weekly buckets
def test_the_sums_are_those_of_adding_every_attempt_bucket_by_bucket(roles, days):
    """PostgreSQL sums the report; here each attempt is added one at a time, as the module doc says."""
    import random

    from scheduler.gpu_allocation import gpu_count
    from scheduler.usage import bucket_floor, bucket_seconds

    rng = random.Random(days)
    project = Project.objects.create(name="p")
    start, end = T0, T0 + timedelta(days=days)
    now = end - timedelta(hours=3)  # a report asked before its period is over
    for i in range(60):
        begin = start + timedelta(hours=rng.uniform(-48, days * 24))
        finish = None if rng.random() < 0.15 else begin + timedelta(hours=rng.expovariate(1 / 20))
        nodes = {f"n{k}": list(range(rng.choice([0, 1, 2, 4]))) for k in range(rng.choice([1, 1, 2]))}
        job = Job.objects.create(owner=rng.choice([roles.owner, roles.other]), project=rng.choice([project, None]),
                                 name="j", command="x", num_gpus=1, job_class=rng.choice(["TE", "BE"]),
                                 submitted_at=begin)
        Attempt.objects.create(job=job, number=1, gpu_allocation=nodes, started_at=begin, ended_at=finish,
                               state=rng.choice([AttemptState.COMPLETED, AttemptState.PREEMPTED]),
                               lost_gpu_seconds=rng.choice([None, 600.0]))
    data = report(roles.staff, UsageQuery(start, end, "project"), now=now)
    step = bucket_seconds(start, end)
    base = bucket_floor(start.timestamp(), step)
    series: dict[str, list[float]] = {}
    hours: dict[tuple[str, str], float] = {}
    for a in Attempt.objects.select_related("job__project"):
        name = a.job.project.name if a.job.project else NO_PROJECT
        s = max(a.started_at, start).timestamp()
        e = min(a.ended_at or now, end, now).timestamp()
        if e <= s or not gpu_count(a.gpu_allocation) or a.started_at >= end:
            continue
        key = (name, a.job.job_class)
        hours[key] = hours.get(key, 0.0) + gpu_count(a.gpu_allocation) * (e - s) / 3600
        values = series.setdefault(name, [0.0] * len(data["series"]["buckets"]))
        for i in range(len(values)):  # the overlap with bucket i, every bucket
            lo, hi = base + i * step, base + (i + 1) * step
            values[i] += gpu_count(a.gpu_allocation) * max(0.0, min(e, hi) - max(s, lo)) / 3600
    assert {(r["project"], r["job_class"]): r["gpu_hours"] for r in data["rows"] if r["gpu_hours"]} == {
        key: pytest.approx(round(v, 4), abs=1e-4) for key, v in hours.items()}
    for name, values in series.items():
        assert data["series"]["gpu_hours"][name] == [pytest.approx(round(v, 4), abs=1e-4) for v in values]

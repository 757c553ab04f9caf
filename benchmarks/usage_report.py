"""Usage reports over a long history: what one report costs when the cluster has run for months.

Builds a fresh database (``<DATABASE_URL name>_cycle``, as ``benchmarks/cycle_scale.py`` makes it)
with ``--attempts`` finished jobs of one attempt each, spread over the last 180 days (20 users in 5
projects, 1-8 GPUs, log-normal run times of about an hour), then times
``scheduler.usage.report`` (what the usage page, its CSV, ``GET /api/v1/usage/`` and ``gpusched usage``
run) for staff and for a member of one project, over each period of ``--periods`` days ending
today (median of ``--repeat``). Runs on earlier commits too (``PYTHONPATH`` set to their tree).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python benchmarks/usage_report.py --attempts 300000 --json usage_report.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cycle_scale import django_on_fresh_database  # noqa: E402

USERS, PROJECTS, DAYS = 20, 5, 180


def fill(attempts: int, seed: int) -> None:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from scheduler.models import Attempt, AttemptState, Job, JobState
    from scheduler.projects import Membership, Project

    rng = random.Random(seed)
    projects = [Project.objects.create(name=f"proj{i}") for i in range(PROJECTS)]
    users = [User.objects.create_user(f"u{i}") for i in range(USERS)]
    project_of = {u.pk: projects[i % PROJECTS] for i, u in enumerate(users)}
    Membership.objects.bulk_create(Membership(user=u, project=project_of[u.pk]) for u in users)
    now = timezone.now()
    for first in range(0, attempts, 20000):
        jobs = []
        for _ in range(first, min(attempts, first + 20000)):
            user = rng.choice(users)
            start = now - timedelta(seconds=rng.uniform(0, DAYS * 86400))
            jobs.append(Job(owner=user, project=project_of[user.pk], name="h", command="python train.py",
                            job_class=rng.choice(["TE", "BE", "BE"]), num_gpus=rng.choice([1, 2, 4, 8]),
                            state=JobState.COMPLETED, submitted_at=start, started_at=start, first_started_at=start,
                            ended_at=start + timedelta(seconds=rng.lognormvariate(7, 1.5)), attempt_count=1))
        Job.objects.bulk_create(jobs, batch_size=5000)
        Attempt.objects.bulk_create(
            [Attempt(job=j, number=1, gpu_allocation={"n1": list(range(j.num_gpus))}, state=AttemptState.COMPLETED,
                     started_at=j.started_at, ended_at=j.ended_at) for j in jobs], batch_size=5000)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def measure(periods: list[int], repeat: int) -> list[dict]:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from scheduler import usage

    staff = User.objects.create_user("bench-staff", is_staff=True)
    member = User.objects.get(username="u0")
    rows = []
    for days in periods:
        now = timezone.now()
        query = usage.parse_query({"from": (now - timedelta(days=days)).date().isoformat()}, now=now)
        row = {"period_days": days}
        for label, viewer in (("staff_s", staff), ("member_s", member)):
            times = []
            for _ in range(repeat):
                began = time.perf_counter()
                usage.report(viewer, query, now=now)
                times.append(time.perf_counter() - began)
            row[label] = round(statistics.median(times), 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=300_000)
    parser.add_argument("--periods", type=int, nargs="+", default=[7, 30, 180])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    django_on_fresh_database(parser)
    fill(args.attempts, args.seed)
    rows = measure(args.periods, args.repeat)
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "usage_report", "attempts": args.attempts,
                                         "results": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

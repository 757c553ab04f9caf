"""What live fair share costs a scheduling cycle: the snapshot (it reads the projects' shares and the
attempts of the usage window) and the policy (it orders, bounds TE and reclaims by tenant), with
``SCHEDULER_FAIR_SHARE`` off and on, side by side on the same database.

Each size (``--nodes`` N with 8 GPUs each, 10 N pending jobs) is filled as ``benchmarks/cycle_scale.py``
fills it (90 % of GPUs busy, 20 users), then: 4 projects with every user a member of one, every job
charged to its owner's project, and ``--history`` ended attempts per running job spread over the last
day (what the usage query reads besides the running attempts). Then, alternately off and on,
``--repeat`` times: ``snapshot.build(now)`` and ``policy.decide(snapshot, now)`` (the configured
policy, default fitgpp, with the loop's parameters; both with the garbage collector paused, as the loop
runs them); then ``--repeat`` times the fair-share standing
that ``GET /api/v1/fairshare/`` answers, computed (``standing_s``, every project) and served from its
cache (``standing_cached_s``). Medians are reported.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gs REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python benchmarks/fair_share_cycle.py --nodes 100 1000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cycle_scale import _fill, django_on_fresh_database  # noqa: E402 - after the path is set

PROJECTS = 4


def _charge(history: int, seed: int) -> int:
    """Projects, memberships, each job's project and ``history`` ended attempts per running job;
    returns the number of attempts added."""
    from datetime import timedelta

    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from scheduler.models import Attempt, AttemptState, Job, JobState
    from scheduler.projects import Membership, Project

    rng = random.Random(seed)
    Project.objects.all().delete()  # the fill emptied the jobs that referenced them
    projects = Project.objects.bulk_create(Project(name=f"p{k}", share=float(k + 1)) for k in range(PROJECTS))
    users = list(User.objects.order_by("pk"))
    Membership.objects.bulk_create(Membership(project=projects[i % PROJECTS], user=u, is_default=True)
                                   for i, u in enumerate(users))
    for i, u in enumerate(users):
        Job.objects.filter(owner=u).update(project=projects[i % PROJECTS])
    now = timezone.now()
    old = []
    for job in Job.objects.filter(state=JobState.RUNNING).only("pk", "owner_id", "project_id", "num_gpus"):
        for _ in range(history):
            start = now - timedelta(seconds=rng.uniform(3600, 86400))
            old.append(Job(owner_id=job.owner_id, project_id=job.project_id, name="done", command="x",
                           num_gpus=job.num_gpus, state=JobState.COMPLETED, submitted_at=start))
    Job.objects.bulk_create(old, batch_size=5000)
    Attempt.objects.bulk_create(
        [Attempt(job=j, number=1, gpu_allocation={"gone": list(range(j.num_gpus))}, state=AttemptState.COMPLETED,
                 started_at=j.submitted_at, ended_at=j.submitted_at + timedelta(seconds=rng.uniform(60, 3600)))
         for j in old], batch_size=5000)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    return len(old)


def _measure(repeat: int) -> dict:
    from django.conf import settings
    from django.utils import timezone

    from scheduler import loop, snapshot

    policy = loop.current_policy()
    times: dict[str, list[float]] = {k: [] for k in ("snapshot_off_s", "snapshot_on_s", "policy_off_s",
                                                     "policy_on_s")}
    for _ in range(repeat):
        for mode in ("off", "on"):
            settings.SCHEDULER_FAIR_SHARE = mode == "on"
            now = timezone.now()
            t = time.perf_counter()
            with loop.gc_paused():
                cycle = snapshot.build(now)
            times[f"snapshot_{mode}_s"].append(time.perf_counter() - t)
            decisions = []  # the previous run's, freed before the clock starts
            with loop.gc_paused():  # as the loop decides
                t = time.perf_counter()
                decisions = policy.decide(cycle.snapshot, now.timestamp())
                times[f"policy_{mode}_s"].append(time.perf_counter() - t)
            times.setdefault(f"decisions_{mode}", []).append(len(decisions))
    medians = {k: round(statistics.median(v), 4) if k.endswith("_s") else v[0] for k, v in times.items()}
    return {**medians, **_standing(repeat)}


def _standing(repeat: int) -> dict[str, float]:
    """Median seconds of one computation of every project's standing (``fair_standing.figures``,
    what a GET /api/v1/fairshare/ or ``gpusched share`` costs when no computation of the last
    ``FAIR_STANDING_CACHE_SECONDS`` serves it) and of a report served from that cache, for a staff
    viewer (every project), ``repeat`` times each."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from scheduler import coordination, fair_standing

    staff = User(pk=0, username="benchmark-staff", is_staff=True)  # never saved: staff see every project
    computed, cached = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        fair_standing.figures(timezone.now())
        computed.append(time.perf_counter() - t)
    coordination.redis_client().delete(fair_standing.CACHE_KEY)
    fair_standing.report(staff)  # computes and caches
    for _ in range(repeat):
        t = time.perf_counter()
        fair_standing.report(staff)
        cached.append(time.perf_counter() - t)
    coordination.redis_client().delete(fair_standing.CACHE_KEY)
    return {"standing_s": round(statistics.median(computed), 4), "standing_cached_s": round(statistics.median(cached), 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--history", type=int, default=5, help="ended attempts per running job in the last day")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    django_on_fresh_database(parser)
    rows = []
    for n in args.nodes:
        fill = _fill(n, 10 * n, args.seed)
        history = _charge(args.history, args.seed)
        row = {**fill, "history_attempts": history, **_measure(args.repeat), "repeat": args.repeat,
               "policy": os.environ.get("SCHEDULER_POLICY", "fitgpp")}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "fair_share_cycle", "results": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

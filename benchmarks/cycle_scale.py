"""One scheduling cycle of the live loop at scale: policy time and the whole cycle with the database.

For each size (``--nodes`` N, each with 8 GPUs, and ``--pending-per-node``
times N pending jobs; default N = 10, 100, 1000, so up to 1,000 nodes and
10,000 pending jobs) a fresh database (``<name>_cycle`` on the PostgreSQL of
``DATABASE_URL``, migrated once) is filled with a busy cluster:

* 90 % of the GPUs held by running BE jobs of 1, 2, 4 or 8 GPUs (one node
  each), with their attempts and GPU rows, as the loop would have left them;
* the pending queue: 20 % TE jobs of 1-2 GPUs, 80 % BE jobs of 1-8 GPUs, from
  20 users, in submission order, no quotas.

Then the cycle of ``scheduler.loop.run_cycle`` runs phase by phase with the
configured policy (``SCHEDULER_POLICY``, default fitgpp):

* ``snapshot_s``: reading the database into the core's Snapshot;
* ``policy_s``: ``policy.decide(snapshot, now)`` alone (median of ``--repeat``
  calls on the same snapshot; the policy is pure);
* ``apply_s``: the conditional writes, inside the transaction;
* ``commit_s``: the commit and what runs on it: agent commands (counted
  here) and the live-update hints to the channel layer (Redis of
  ``REDIS_URL``), one per job whose state or pending reason changed;
* ``snapshot_gc_s``: the snapshot read again with Python's cyclic collector
  running (the loop pauses it during a cycle, ``scheduler.loop.gc_paused``);
* ``cycle_s``: all of it, once, as the loop runs it (first cycle after the
  fill: it starts jobs on the free GPUs, preempts for TE jobs, writes pending
  reasons), as a worker's first cycle: with no job rows kept (``scheduler.kept_rows``;
  the second fill truncated and refilled every table, which a live database never
  sees, so every row kept from before it would have changed; ``--stale-kept-rows``
  keeps them, and the cycle then reads every version before reading every row), with ``first_command_s``: from the cycle's start to its first agent
  command (sent once the starts and preemptions commit), and ``next_cycle_s``: the cycle after it (nothing new: the steady
  state of a busy cluster); ``next_snapshot_s``, ``next_policy_s``,
  ``next_apply_s``, ``next_commit_s``: that cycle's phases; ``third_cycle_s`` and
  ``third_*_s``: the cycle after that, the first in which no job row changed since
  the last read (the next cycle reads again the rows whose pending reason the
  first one wrote: ``scheduler.kept_rows``).

Then, on the cluster as the first cycle left it, the start-time forecasts
(``scheduler.forecasts.recompute``, what the background task runs):

* ``forecast_s``: the whole recomputation (snapshot read, history read, the
  policy run forward on the simulator's engine, the Redis hash written);
* ``forecast_draws``: the runs the recomputation made (each job's forecast is
  its median start over them; as many as fit in ``scheduler.forecasts.DRAW_BUDGET_S``);
* ``forecast_core_s``: the forward run alone (``forecast_starts``), median of
  ``--repeat`` runs; ``forecast_batches``: its decide calls; ``forecast_unstarted``:
  pending jobs not started within the horizon.

Each size is filled and measured ``--runs`` times (default 3); a row gives
the median of each time over the runs. Agent commands are counted, not
published (their broker cost is benchmarks/agent_latency.py's subject);
scheduling triggers are off. The script also runs on earlier commits (their
loop has no ``gc_paused``: the collector then stays on), so a before/after
table can use one script on both trees.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gs_adv REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python benchmarks/cycle_scale.py --json cycle_scale.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GPUS_PER_NODE = 8
USERS = 20


def _database(base_url: str) -> str:
    import psycopg

    parsed = urlparse(base_url)
    name = (parsed.path.lstrip("/") or "gpusched") + "_cycle"
    with psycopg.connect(urlunparse(parsed._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urlunparse(parsed._replace(path=f"/{name}"))
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "portal.settings",
           "SECRET_KEY": "benchmark-only-secret-key"}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=900)
    return url


def django_on_fresh_database(parser: argparse.ArgumentParser) -> str:
    """Make ``<DATABASE_URL name>_cycle`` afresh and migrated (``_database``), point Django at it with
    scheduling triggers off, and set Django up; returns the database's URL. The benchmarks that fill a
    cluster share it."""
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpusched")
    if not base.startswith("postgres"):
        parser.error("DATABASE_URL must name a PostgreSQL server")
    url = _database(base)
    os.environ.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "portal.settings",
                       "SECRET_KEY": "benchmark-only-secret-key", "SCHEDULER_AUTORUN": "0"})
    import django

    django.setup()
    return url


def _fill(nodes: int, pending: int, seed: int) -> dict:
    """Empty the tables and build the busy cluster described in the module doc; returns counts."""
    from datetime import timedelta

    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from cluster.models import Gpu, Node
    from scheduler.models import Attempt, AttemptState, Job, JobClassChoice, JobEvent, JobState

    with connection.cursor() as cur:
        cur.execute("TRUNCATE scheduler_jobevent, scheduler_attemptlog, scheduler_attempt, cluster_gpu, "
                    "cluster_node, scheduler_job, auth_user CASCADE")
    rng = random.Random(seed)
    now = timezone.now()
    users = User.objects.bulk_create(User(username=f"u{i}", password="!") for i in range(USERS))
    node_rows = Node.objects.bulk_create(
        Node(name=f"node-{i:05d}", gpus=GPUS_PER_NODE, cpus=64, mem_gb=512, last_heartbeat=now) for i in range(nodes))
    target_busy = int(0.9 * nodes * GPUS_PER_NODE)
    running: list[tuple[Job, Node, list[int]]] = []
    busy = 0
    for node in node_rows:
        index = 0
        while index < GPUS_PER_NODE and busy < target_busy:
            size = min(rng.choice([1, 2, 4, 8]), GPUS_PER_NODE - index, target_busy - busy)
            started = now - timedelta(seconds=rng.uniform(60, 20000))
            job = Job(owner=rng.choice(users), name="running", command="python train.py", job_class=JobClassChoice.BE,
                      num_gpus=size, grace_period=rng.choice([10, 30, 60, 300]), state=JobState.RUNNING,
                      submitted_at=started, started_at=started, first_started_at=started, attempt_count=1)
            running.append((job, node, list(range(index, index + size))))
            index += size
            busy += size
    Job.objects.bulk_create([job for job, _, _ in running], batch_size=2000)
    Attempt.objects.bulk_create(
        [Attempt(job=job, number=1, gpu_allocation={node.name: idx}, state=AttemptState.RUNNING,
                 started_at=job.started_at) for job, node, idx in running], batch_size=2000)
    holder = {(node.pk, i): job for job, node, idx in running for i in idx}
    Gpu.objects.bulk_create(
        [Gpu(node=node, index=i, model_name="Virtual GPU", allocated_to=holder.get((node.pk, i)))
         for node in node_rows for i in range(GPUS_PER_NODE)], batch_size=5000)
    waiting = []
    t0 = now - timedelta(seconds=pending * 2)
    for k in range(pending):
        te = rng.random() < 0.2
        waiting.append(Job(owner=rng.choice(users), name=f"p{k}", command="python train.py",
                           job_class=JobClassChoice.TE if te else JobClassChoice.BE,
                           num_gpus=rng.choice([1, 1, 2]) if te else rng.choice([1, 1, 2, 4, 8]),
                           grace_period=30, submitted_at=t0 + timedelta(seconds=2 * k)))
    Job.objects.bulk_create(waiting, batch_size=5000)
    JobEvent.objects.bulk_create(
        [JobEvent(job=j, at=j.submitted_at, to_state=JobState.PENDING, reason="Submitted") for j in waiting],
        batch_size=5000)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    return {"nodes": nodes, "gpus": nodes * GPUS_PER_NODE, "running": len(running), "busy_gpus": busy,
            "pending": pending}


def _cycle_phases(repeat: int, save: Path | None = None) -> dict:
    """One cycle phase by phase, each as ``scheduler.loop.run_cycle`` runs it (collector paused);
    ``save``: write the cycle's snapshot and time there first (pickle, for policy_decide.py --snapshot)."""
    from django.db import transaction
    from django.utils import timezone

    from scheduler import apply, cancel_kills, loop, snapshot

    policy = loop.current_policy()
    now = timezone.now()
    # Earlier commits (before/after tables) have no gc_paused: their loop ran with the collector on.
    paused = getattr(loop, "gc_paused", contextlib.nullcontext)
    with paused():
        t = time.perf_counter()
        cycle = snapshot.build(now)
        snapshot_s = time.perf_counter() - t
    if save is not None:
        import pickle

        save.write_bytes(pickle.dumps({"snapshot": cycle.snapshot, "now": now.timestamp()}))
    t = time.perf_counter()
    snapshot.build(now)  # the same read with the collector running, to show what pausing it saves
    snapshot_gc_s = time.perf_counter() - t
    policy_times = []
    decisions = []
    with paused():
        for _ in range(repeat):
            # The previous repeat's decisions are freed before the clock starts: the loop frees a
            # cycle's decisions after applying them, not inside its decide().
            decisions = []
            t = time.perf_counter()
            decisions = policy.decide(cycle.snapshot, now.timestamp())
            policy_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        with transaction.atomic():
            applied = apply.apply_decisions(decisions, cycle)
            applied.cancel_kills = cancel_kills.request_cancel_kills(timezone.now())
            apply_s = time.perf_counter() - t
        commit_s = time.perf_counter() - t - apply_s
    kinds: dict[str, int] = {}
    for d in decisions:
        kinds[type(d).__name__] = kinds.get(type(d).__name__, 0) + 1
    return {
        "snapshot_s": snapshot_s, "snapshot_gc_s": snapshot_gc_s, "policy_s": statistics.median(policy_times),
        "policy_min_s": min(policy_times), "apply_s": apply_s, "commit_s": commit_s, "decisions": kinds,
        "started": len(applied.started), "preempted": len(applied.preempted), "pend_updates": applied.pend_updates,
        "skipped": len(applied.skipped),
    }


def _forecast(repeat: int) -> dict:
    """The background forecast on the current cluster: whole, and its forward run alone."""
    from django.utils import timezone

    from scheduler import forecasts, loop, snapshot
    from scheduler.sim.forecast import ForecastRun

    now = timezone.now()
    t = time.perf_counter()
    report = forecasts.recompute(now)
    forecast_s = time.perf_counter() - t
    cycle = snapshot.build(now)
    policy, estimator = loop.current_policy(explain=False), forecasts.history_estimator()
    times, starts, run = [], {}, None
    for _ in range(repeat):
        t = time.perf_counter()
        run = ForecastRun(policy, cycle.snapshot, now.timestamp(), estimator)
        starts = run.forecast()
        times.append(time.perf_counter() - t)
    return {"forecast_s": forecast_s, "forecast_draws": report.draws,
            "forecast_core_s": statistics.median(times), "forecast_pending": report.pending,
            "forecast_batches": run.decide_calls if run else 0,
            "forecast_unstarted": sum(1 for v in starts.values() if v is None)}


def _whole_cycle(sent: dict) -> tuple[float, float | None]:
    """The cycle's seconds, and the seconds to its first agent command (None: it sent none)."""
    from scheduler import loop

    sent["first_at"] = None
    t = time.perf_counter()
    loop.run_cycle()
    first = sent["first_at"]
    return time.perf_counter() - t, (first - t if first is not None else None)


def _one_run(n: int, args: argparse.Namespace, sent: dict, save: Path | None = None) -> dict:
    """Fill, the first and the next cycle phase by phase; fill again, the same two cycles whole."""
    fill = _fill(n, n * args.pending_per_node, args.seed)
    phases = _cycle_phases(args.repeat, save)  # the first cycle after the fill, phase by phase (committed)
    steady = _cycle_phases(args.repeat)  # the cycle after it, phase by phase
    third = _cycle_phases(args.repeat)  # and the one after that: no row changed since the last read
    forecast = _forecast(args.repeat) if args.forecast else {}
    fill_again = _fill(n, n * args.pending_per_node, args.seed)
    assert fill_again == fill
    sent["count"] = 0
    if not args.stale_kept_rows:
        from scheduler import kept_rows

        kept_rows.PENDING_ROWS.clear()
        kept_rows.ACTIVE_ROWS.clear()
    cycle_s, first_command_s = _whole_cycle(sent)  # the same first cycle, as the loop runs it
    commands_sent = sent["count"]
    next_cycle_s, _ = _whole_cycle(sent)
    third_cycle_s, _ = _whole_cycle(sent)
    return {**fill, **phases, **{f"next_{k}": v for k, v in steady.items() if k.endswith("_s")},
            **{f"third_{k}": v for k, v in third.items() if k.endswith("_s")},
            "cycle_s": cycle_s, "first_command_s": first_command_s, "next_cycle_s": next_cycle_s,
            "third_cycle_s": third_cycle_s,
            "commands": commands_sent, **forecast}


def _medians(runs: list[dict]) -> dict:
    """Per key, the median over runs of the seconds; counts (identical fills) from the first run."""
    out = {}
    for key, value in runs[0].items():
        if key.endswith("_s"):
            values = [r[key] for r in runs]
            out[key] = None if None in values else round(statistics.median(values), 4)
        else:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--pending-per-node", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5, help="policy calls per size (median reported)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3, help="fills and cycles per size (medians reported)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-forecast", dest="forecast", action="store_false",
                        help="skip the start-time forecast measurement (earlier commits have none)")
    parser.add_argument("--save-snapshot", type=Path, metavar="FILE",
                        help="write the first cycle's snapshot (one --nodes size) for policy_decide.py --snapshot")
    parser.add_argument("--stale-kept-rows", action="store_true",
                        help="keep the rows kept before the second fill for the whole first cycle (see cycle_s)")
    parser.add_argument("--without-hints", action="store_true",
                        help="diagnostic: send no live-update hints (shows their share of commit_s)")
    args = parser.parse_args(argv)
    if args.save_snapshot is not None and len(args.nodes) != 1:
        parser.error("--save-snapshot takes one --nodes size")

    django_on_fresh_database(parser)
    from cluster import commands

    sent: dict = {"count": 0, "first_at": None}

    def count(node: str, task: str, kwargs: dict) -> bool:
        sent["count"] += 1
        if sent["first_at"] is None:
            sent["first_at"] = time.perf_counter()
        return True

    commands.send = count
    if args.without_hints:
        from portal import realtime

        realtime.publish_job_changed = lambda job: None
        realtime.publish_jobs_changed = lambda job_ids: None

    rows = []
    for n in args.nodes:
        runs = [_one_run(n, args, sent, args.save_snapshot if k == 0 else None) for k in range(args.runs)]
        row = {**_medians(runs), "runs": args.runs, "policy": os.environ.get("SCHEDULER_POLICY", "fitgpp"),
               "hints": not args.without_hints, "stale_kept_rows": args.stale_kept_rows}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "cycle_scale", "results": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

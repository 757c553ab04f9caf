"""Sustained job submissions per second through the REST API, with none lost.

Builds a fresh database (``<name>_bench`` on the PostgreSQL of ``DATABASE_URL``,
dropped and migrated first), starts a private redis-server, the portal
(``portal.web_processes``, as ``scripts/serve.sh web`` runs it: ``--portals N`` daphne
processes sharing one listening socket, by default as many as it starts, one per
core up to 4) and a Celery worker with beat running the
scheduling loop, registers two nodes of 8 GPUs (no agents: started jobs stay
STARTING), then for each size in ``--sizes`` runs a burst of that many POST
/api/v1/jobs/ from ``--clients`` processes (tests/adversarial/load.py) and
reports:

* ``rate``: accepted submissions per second over the burst (the clients'
  wall clock from their common start to the last answer);
* latency percentiles of one POST, seen by the client;
* ``problems``: the audit of stored rows against the 201 answers (every
  accepted job stored exactly once under its id) — must be empty;
* ``decided_after_s``: seconds after the burst until every job of it had a
  decision from the loop (started, or pending with a reason);
* ``cpu_ms_per_job``: CPU time of the portal processes and of the Celery
  worker (with their children) over the burst, per accepted job: what one
  submission costs the server whatever else loads the machine;
* ``db_sessions_opened``: PostgreSQL connections opened on the benchmark's
  database during the burst (``pg_stat_database.sessions``);
* ``loadavg_1min`` before and after the burst.

The portal takes its PostgreSQL connections from a pool, as ``scripts/serve.sh
web`` runs it (``DATABASE_POOL``); ``--no-db-pool`` runs it without, as before.

``--server gunicorn`` serves the WSGI app with gunicorn (``--portals`` gthread
workers of ``--threads`` threads) and ``--server uvicorn`` the ASGI app with uvicorn
(``--portals`` workers) instead of daphne, for comparison (the deployment serves
daphne; neither is a dependency of the project). ``--array K`` posts K jobs per request to
/api/v1/jobs/array/: its rate is jobs per second through job arrays, not
requests per second.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gs_adv \\
        .venv/bin/python benchmarks/api_submit_rate.py --sizes 1000 10000 --clients 4 --portals 2 \\
        --json api_submit_rate.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from portal.web_processes import default_processes  # noqa: E402
from tests.adversarial import load  # noqa: E402
from tests.adversarial.stack import BIN, Proc, RedisServer, Stack, free_port, wait_for  # noqa: E402


def _bench_database(base_url: str) -> str:
    import psycopg
    from urllib.parse import urlparse, urlunparse

    parsed = urlparse(base_url)
    name = (parsed.path.lstrip("/") or "gpusched") + "_bench"
    admin = urlunparse(parsed._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunparse(parsed._replace(path=f"/{name}"))


def _django(database_url: str, redis_url: str) -> None:
    os.environ.update({"DJANGO_SETTINGS_MODULE": "portal.settings", "DATABASE_URL": database_url,
                       "REDIS_URL": redis_url, "SECRET_KEY": "benchmark-only-secret-key",
                       "SCHEDULER_AUTORUN": "0"})
    import django

    django.setup()


def in_process_bench_django() -> None:
    """Django in this process on a fresh, migrated ``<DATABASE_URL name>_bench`` database and
    ``REDIS_URL``, answering the test client (``testserver``): for the in-process benchmarks."""
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    database_url = _bench_database(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpusched"))
    _django(database_url, os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _setup_cluster(users: int) -> list[str]:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from cluster.models import Gpu, Node
    from portal.models import ApiToken

    for name in ("n1", "n2"):
        node = Node.objects.create(name=name, gpus=8, cpus=64, mem_gb=512, last_heartbeat=timezone.now())
        Gpu.objects.bulk_create(Gpu(node=node, index=i) for i in range(8))
    tokens = []
    for i in range(users):
        user = User.objects.create_user(f"bench{i}", f"bench{i}@example.org", "a-long-bench-password-42")
        tokens.append(ApiToken.issue(user, "bench")[1])
    return tokens


def _portals(stack: Stack, count: int, server: str = "daphne", threads: int = 4, db_pool: bool = True) -> None:
    """The portal server, with ``count`` processes (or workers), on a free port; returns once it answers.

    ``server``: ``daphne`` runs ``python -m portal.web_processes`` as ``scripts/serve.sh web`` does
    (``count`` daphne processes on one socket, the ASGI app); ``uvicorn`` the ASGI app with ``count``
    workers; ``gunicorn`` the WSGI app, ``count`` gthread workers of ``threads`` threads each (HTTP
    only, no WebSockets). ``db_pool``: the ASGI servers take their PostgreSQL connections from a pool
    (``DATABASE_POOL``, as scripts/serve.sh web has it).
    """
    stack.portal_port = stack.portal_port or free_port()
    port = str(stack.portal_port)
    pool = {"DATABASE_POOL": "true" if db_pool else "false"}
    if server == "gunicorn":
        command, env = [str(BIN / "gunicorn"), "--bind", f"127.0.0.1:{port}", "--workers", str(count),
                        "--worker-class", "gthread", "--threads", str(threads), "--keep-alive", "30",
                        "--log-level", "warning", "portal.wsgi:application"], {}
    elif server == "uvicorn":
        command, env = [str(BIN / "uvicorn"), "--host", "127.0.0.1", "--port", port, "--workers", str(count),
                        "--log-level", "warning", "--no-access-log", "portal.asgi:application"], pool
    else:
        command = [sys.executable, "-m", "portal.web_processes"]
        env = {**pool, "HOST": "127.0.0.1", "PORT": port, "WEB_PROCESSES": str(count)}
    proc = Proc("portal", command, stack.tmp / "portal.log", stack.env(**env))
    stack.procs[proc.name] = proc
    proc.start()
    wait_for(lambda: stack._answers("/accounts/login/"), "the portal to answer")


def _tree_cpu_seconds(root_pids: list[int]) -> float:
    """User + system CPU seconds of these processes and all their descendants, from /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = int(fields[11]) + int(fields[12])
    wanted = set(root_pids)
    changed = True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if ppid in wanted and pid not in wanted:
                wanted.add(pid)
                changed = True
    return sum(used.get(pid, 0) for pid in wanted) / ticks


def _cpu_groups(stack: Stack) -> dict[str, float]:
    """CPU seconds so far of the portal processes and of the Celery worker (with their children)."""
    groups: dict[str, list[int]] = {"portal": [], "worker": []}
    for name, proc in stack.procs.items():
        if proc.process is not None:
            groups["portal" if name.startswith("portal") else "worker"].append(proc.process.pid)
    return {name: _tree_cpu_seconds(pids) for name, pids in groups.items()}


def _db_sessions() -> int:
    """Sessions PostgreSQL has counted on this database so far (``pg_stat_database.sessions``)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000], help="burst sizes, run in order")
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--users", type=int, default=4, help="users (one API token each)")
    parser.add_argument("--portals", type=int, default=default_processes(),
                        help="portal processes (daphne) or workers (gunicorn, uvicorn); default: as scripts/serve.sh web")
    parser.add_argument("--server", choices=["daphne", "uvicorn", "gunicorn"], default="daphne",
                        help="HTTP server of the portal: daphne (ASGI, as deployed), uvicorn (ASGI) or gunicorn "
                             "(WSGI, gthread)")
    parser.add_argument("--no-db-pool", action="store_true",
                        help="daphne opens its own PostgreSQL connections (DATABASE_POOL=false), as before the pool")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument("--array", type=int, default=0, metavar="K",
                        help="submit K jobs per request through /api/v1/jobs/array/ (0: one job per request)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpusched")
    if not base.startswith("postgres"):
        parser.error("DATABASE_URL must name a PostgreSQL server")
    with tempfile.TemporaryDirectory(prefix="api-rate-") as tmp_name:
        tmp = Path(tmp_name)
        redis = RedisServer(tmp).start()
        database_url = _bench_database(base)
        stack = Stack(tmp, database_url, redis.url, settings={
            "SCHEDULER_AUTORUN": "1", "SCHEDULER_TICK_SECONDS": "1", "AGENT_HEARTBEAT_SECONDS": "3600",
            "LOG_LEVEL": "WARNING"})
        rows = []
        try:
            stack.migrate()
            _django(database_url, redis.url)
            tokens = _setup_cluster(args.users)
            _portals(stack, args.portals, args.server, args.threads, not args.no_db_pool)
            stack.worker(concurrency=2)
            for size in args.sizes:
                rows.append(_one_burst(stack, tokens, size, args.clients, args.portals, args.array))
                rows[-1]["server"] = args.server
                rows[-1]["db_pool"] = args.server == "daphne" and not args.no_db_pool
                if set(rows[-1]["statuses"]) - {"201"}:  # show why, from the portal's log, before it is removed
                    for name, proc in stack.procs.items():
                        if name.startswith("portal") and "Traceback" in proc.output():
                            log = proc.output()
                            print(f"--- {name} log ---\n{log[log.index('Traceback') - 2000:][:6000]}", file=sys.stderr)
                print(json.dumps(rows[-1]), flush=True)
        finally:
            stack.stop_all()
            redis.stop()
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "api_submit_rate", "results": rows}, indent=2) + "\n")
    return 0 if all(not r["problems"] for r in rows) else 1


def _one_burst(stack: Stack, tokens: list[str], size: int, clients: int, portals: int, array: int = 0) -> dict:
    from scheduler.models import Job, JobState

    cpu_before = _cpu_groups(stack)
    sessions_before = _db_sessions()
    load_before = os.getloadavg()
    result = load.burst(stack.base_url, tokens, size, clients, per_request=array)
    burst_end = time.monotonic()
    load_after = os.getloadavg()
    cpu = {name: seconds - cpu_before[name] for name, seconds in _cpu_groups(stack).items()}
    names = set(result.accepted)
    prefix = next(iter(names)).rsplit("-", 2)[0] if names else "load-none"
    stored = list(Job.objects.filter(name__startswith=prefix + "-").values_list("id", "name"))
    problems = load.audit(stored, result)

    def undecided() -> int:
        return Job.objects.filter(name__startswith=prefix + "-", state=JobState.PENDING, pending_reason="").count()

    wait_for(lambda: undecided() == 0, "every job to get a decision", timeout=1800, interval=0.5)
    decided_after = time.monotonic() - burst_end
    time.sleep(1.0)  # PostgreSQL's statistics trail by up to a second
    sessions = _db_sessions() - sessions_before
    lat = result.latencies
    return {
        "submissions": size, "clients": clients, "portals": portals, "accepted": len(result.accepted),
        "statuses": {str(k): v for k, v in result.statuses.items()}, "seconds": round(result.seconds, 2),
        "rate": round(result.rate, 1),
        "latency_ms": {"p50": round(1000 * _percentile(lat, 0.5), 1), "p95": round(1000 * _percentile(lat, 0.95), 1),
                       "p99": round(1000 * _percentile(lat, 0.99), 1),
                       "mean": round(1000 * statistics.fmean(lat), 1) if lat else None},
        "errors": result.errors[:5], "stored": len(stored), "problems": problems[:10], "decided_after_s": round(decided_after, 1),
        "jobs_per_request": array or 1,
        # PostgreSQL sessions (connections) opened on the benchmark's database during the burst, by anyone.
        "db_sessions_opened": sessions,
        # CPU milliseconds per accepted job over the burst: the portal processes, the Celery worker.
        "cpu_ms_per_job": {name: round(1000 * seconds / max(1, len(result.accepted)), 2)
                           for name, seconds in cpu.items()},
        # The load generator's own CPU per accepted job (all client processes), on the same cores.
        "client_cpu_ms_per_job": round(1000 * result.client_cpu_seconds / max(1, len(result.accepted)), 2),
        "loadavg_1min": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
    }


if __name__ == "__main__":
    sys.exit(main())

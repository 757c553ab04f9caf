"""GPU telemetry at scale: server-side ingestion CPU, Redis memory per GPU and ``/metrics`` latency.

Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python benchmarks/gpu_telemetry.py [--nodes 1000] [--gpus 8] [--rounds 3] [--json FILE]

Builds a fresh database ``<DATABASE_URL name>_telemetry_bench`` (dropped at the end) with
``--nodes`` nodes of ``--gpus`` GPUs, half of each node's GPUs held by a job. The reports are
made by the agent's own code (``cluster.agent.telemetry.TelemetrySampler`` over the simulated
source, one per node, seeded), ``--rounds`` sampling intervals of every node, before anything
is timed. Then, in this one process:

* **ingestion**: every report goes through the report task as a worker runs it
  (``gputelemetry.tasks.telemetry.apply``: per-node signature check, version check, schema check,
  one Redis pipeline); the process CPU time (user + system) it took, per report and as the
  share of one core that 1 report per node per ``--interval`` seconds costs. Then the same
  reports through the telemetry stream, drained in this process (``gputelemetry.drain``,
  batches of 500). The handler alone
  (schema check and Redis pipeline, without Celery's task machinery) is timed too. Redis's own
  CPU is the server's ``used_cpu_user + used_cpu_sys`` over the same span (a shared Redis
  includes other clients' work in it);
* **memory**: one GPU's ring after a full day of samples (every slot of every tier written):
  Redis ``MEMORY USAGE`` of the ring, and the node's latest-reading hash divided by its GPUs;
* with ``--idle-reclaim``, ingestion also keeps each attempt's idle mark (``scheduler.idleness``,
  one more Redis round trip per report), as it does on a site with idle reclaim on;
* **/metrics**: the whole scrape through Django's test client (scheduler metrics and
  8,000 GPUs' DCGM series), median and max of ``--scrapes``;
* with ``--worker``, the same reports through a real Celery worker (one pool process, the
  deployment's worker command), sent as agents send them and at their pace (``--interval``
  spread over the nodes): appended to the telemetry stream and drained once a second, as
  beat has it drained, and (``--worker-path``) as one report task each, as agents without a
  Redis broker send them: the worker's CPU (parent and pool process, from /proc) per report
  and as a share of one core, and Redis's over the same span (appending included).

Telemetry keys written (``gpusched:telemetry:*``) are deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.e2e_latency import drop_database, recreate_database  # noqa: E402


def bench_url() -> str:
    from urllib.parse import urlparse

    parsed = urlparse(os.environ.get("DATABASE_URL", ""))
    if not parsed.scheme.startswith("postgres"):
        raise SystemExit("DATABASE_URL must name a PostgreSQL database (postgres://...)")
    return parsed._replace(path=f"/{parsed.path.lstrip('/')}_telemetry_bench").geturl()


def setup_django(database_url: str) -> None:
    os.environ.update({"DJANGO_SETTINGS_MODULE": "portal.settings", "DATABASE_URL": database_url,
                       "SECRET_KEY": os.environ.get("SECRET_KEY") or "benchmark-only-secret-key",
                       "GPUSCHED_AGENT_SECRET": "bench-secret", "METRICS_TOKEN": "bench-metrics", "ALLOWED_HOSTS": "testserver",
                       "LOG_LEVEL": "WARNING"})
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def make_cluster(nodes: int, gpus: int) -> list[str]:
    from cluster.models import Gpu, Node

    names = [f"node{n:04d}" for n in range(nodes)]
    Node.objects.bulk_create(Node(name=name, gpus=gpus, cpus=64, mem_gb=512) for name in names)
    by_name = dict(Node.objects.values_list("name", "pk"))
    Gpu.objects.bulk_create(Gpu(node_id=by_name[name], index=i, model_name="NVIDIA H100 80GB HBM3")
                            for name in names for i in range(gpus))
    return names


def authenticated(report: dict, how: str) -> dict:
    """``report`` as an agent sends it: signed with its node's token (``how`` "signature", as agents do), or
    carrying the token ("token", as agents older than signing did)."""
    from cluster import auth, protocol, message_signing

    token = auth.node_token("bench-secret", report["node"])
    if how == "token":
        return {**report, "token": token}
    return message_signing.signed(token, protocol.REPORT_TELEMETRY, report, time.time())


def make_reports(names: list[str], gpus: int, rounds: int, interval: float, workdir: Path,
                 how: str = "signature") -> list[list[dict]]:
    """``rounds`` lists of one report per node, from the agent's sampler over the simulated source,
    authenticated as ``authenticated`` says."""
    from cluster import protocol
    from cluster.agent.attempt import TrackedAttempt
    from cluster.agent.gpu_sources import SimulatedSource
    from cluster.agent.telemetry import TelemetrySampler

    out: list[list[dict]] = [[] for _ in range(rounds)]
    start = time.time() - rounds * interval
    for k, name in enumerate(names):
        sampler = TelemetrySampler(SimulatedSource(name, gpus, workdir / "none.json", seed=k), interval)
        held = [TrackedAttempt(job_id=k + 1, attempt=1, pgid=1, start_ticks=None, started_at=0.0, grace_period=1.0,
                               time_limit=None, job_dir="", checkpoint_dir="", gpu_indices=list(range(gpus // 2)))]
        for r in range(rounds):
            report = sampler.collect(start + r * interval, held)
            sampler.delivered()
            out[r].append(authenticated({"node": name, **report, "protocol_version": protocol.PROTOCOL_VERSION}, how))
    return out


def redis_cpu(conn) -> float:  # noqa: ANN001
    info = conn.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def time_ingestion(rounds: list[list[dict]], interval: float, conn) -> dict:  # noqa: ANN001
    from cluster import telemetry_schema
    from gputelemetry import services, tasks

    reports = [r for batch in rounds for r in batch]
    nodes = len(rounds[0])
    redis_before, cpu_before, wall_before = redis_cpu(conn), time.process_time(), time.perf_counter()
    for kwargs in reports:
        tasks.telemetry.apply(kwargs=kwargs)
    task_cpu, wall = time.process_time() - cpu_before, time.perf_counter() - wall_before
    redis_used = redis_cpu(conn) - redis_before
    cpu_before = time.process_time()
    for kwargs in reports:
        services.ingest(kwargs["node"], telemetry_schema.check_report(kwargs["sampled_at"], kwargs["gpus"], kwargs["jobs"]))
    handler_cpu = time.process_time() - cpu_before
    drain_cpu = time_drain(reports)
    per_report = task_cpu / len(reports)
    return {
        "reports": len(reports),
        "task_cpu_ms_per_report": round(1000 * per_report, 3),
        "handler_cpu_ms_per_report": round(1000 * handler_cpu / len(reports), 3),
        "wall_ms_per_report": round(1000 * wall / len(reports), 3),
        "core_share_at_interval": round(per_report * nodes / interval, 4),
        "handler_core_share_at_interval": round(handler_cpu / len(reports) * nodes / interval, 4),
        "drain_cpu_ms_per_report": round(1000 * drain_cpu / len(reports), 3),
        "drain_core_share_at_interval": round(drain_cpu / len(reports) * nodes / interval, 4),
        "redis_cpu_s": round(redis_used, 3),
        "redis_core_share_at_interval": round(redis_used / len(reports) * nodes / interval, 4),
    }


def time_drain(reports: list[dict]) -> float:
    """Process CPU seconds of draining ``reports`` from the telemetry stream in this process
    (``gputelemetry.drain``: the beat task's work without Celery's), the appending not counted."""
    from cluster import telemetry_stream
    from gputelemetry import drain

    stream = redis_client_of_broker()
    stream.delete(telemetry_stream.STREAM_KEY)
    drain._group_ready.clear()
    pipe = stream.pipeline(transaction=False)
    for kwargs in reports:
        pipe.xadd(telemetry_stream.STREAM_KEY, telemetry_stream.encode(kwargs))
    pipe.execute()
    cpu_before = time.process_time()
    while drain.drain(stream, "bench", budget_s=60).read:
        pass
    cpu = time.process_time() - cpu_before
    stream.delete(telemetry_stream.STREAM_KEY)
    return cpu


def _tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its child processes (from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.parent.name) == pid or int(fields[1]) == pid:  # fields[1]: the parent's pid
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def time_worker(rounds: list[list[dict]], interval: float, conn, database_url: str,  # noqa: ANN001
                pool: str = "prefork", path: str = "stream", drain_every: float = 1.0) -> dict:
    """The reports through a real Celery worker, as agents send them, at the agents' pace (one report per
    node per ``interval``, spread evenly): appended to the telemetry stream and drained by the beat task
    every ``drain_every`` seconds (``path="stream"``, agents with a Redis broker), or published to the
    report queue as one task each (``path="task"``, agents of other brokers and older ones); consumed by
    ``scripts/serve.sh worker``'s command with one pool process. The worker's CPU (parent and pool
    process, from /proc) from the first report to the last one stored, per report and over that span."""
    import subprocess

    from cluster import protocol, telemetry_stream
    from cluster.models import Node
    from gputelemetry import drain, store, tasks
    from portal.celery import app

    sentinel = "sentinel-node"
    Node.objects.get_or_create(name=sentinel, defaults={"gpus": 1, "cpus": 1, "mem_gb": 1})
    conn.delete(store.latest_key(sentinel), telemetry_stream.STREAM_KEY)
    drain._group_ready.clear()
    first = rounds[-1][0]
    how = "token" if "token" in first else "signature"
    content = {k: v for k, v in first.items() if k not in ("token", "signature", "signed_at")}
    last = authenticated(dict(content, node=sentinel, jobs=[], gpus=first["gpus"][:1]), how)
    env = {**os.environ, "DATABASE_URL": database_url, "CELERY_LOG_LEVEL": "WARNING"}
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "portal", "worker", "--loglevel", "WARNING",
                               "--queues", protocol.REPORT_QUEUE, "--concurrency", "1", "--pool", pool,
                               "--hostname", "bench@%h"],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stream = redis_client_of_broker()

    def send(kwargs: dict) -> None:
        if path == "stream":
            telemetry_stream.publish(stream, kwargs)
        else:
            app.send_task(protocol.REPORT_TELEMETRY, kwargs=kwargs, queue=protocol.REPORT_QUEUE)

    try:
        deadline = time.monotonic() + 120
        while not app.control.ping(destination=[f"bench@{platform.node()}"], timeout=1.0):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise SystemExit("the benchmark's Celery worker did not start")
        time.sleep(2.0)  # let it settle (its start-up work is not the reports')
        reports = [*[r for batch in rounds for r in batch], last]
        gap = interval / len(rounds[0])
        redis_before = redis_cpu(conn)
        cpu_before, wall_before = _tree_cpu_seconds(worker.pid), time.perf_counter()
        next_drain = wall_before + drain_every
        for k, kwargs in enumerate(reports):
            now = time.perf_counter()
            if path == "stream" and now >= next_drain:  # what beat does every drain_every seconds
                app.send_task(tasks.DRAIN_TASK, queue=protocol.REPORT_QUEUE)
                next_drain += drain_every
            pause = wall_before + k * gap - now
            if pause > 0:
                time.sleep(pause)
            send(kwargs)
        while not conn.exists(store.latest_key(sentinel)):
            if worker.poll() is not None:
                raise SystemExit("the benchmark's Celery worker died")
            if path == "stream" and time.perf_counter() >= next_drain:
                app.send_task(tasks.DRAIN_TASK, queue=protocol.REPORT_QUEUE)
                next_drain += drain_every
            time.sleep(0.01)
        wall, cpu = time.perf_counter() - wall_before, _tree_cpu_seconds(worker.pid) - cpu_before
        redis_used = redis_cpu(conn) - redis_before
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        stream.delete(telemetry_stream.STREAM_KEY)
    per_report = cpu / len(reports)
    nodes = len(rounds[0])
    return {"path": path, "reports": len(reports), "worker_cpu_ms_per_report": round(1000 * per_report, 3),
            "worker_core_share_at_interval": round(per_report * nodes / interval, 4),
            "worker_core_share_over_run": round(cpu / wall, 4), "wall_s": round(wall, 2),
            "redis_core_share_over_run": round(redis_used / wall, 4)}


def redis_client_of_broker():  # noqa: ANN201
    import redis
    from django.conf import settings

    from cluster import telemetry_stream

    return redis.Redis.from_url(telemetry_stream.redis_url(settings.CELERY_BROKER_URL))


def measure_memory(conn, gpus: int) -> dict:  # noqa: ANN001
    from cluster.telemetry_schema import check_report
    from gputelemetry import services, store

    node, now = "memprobe", int(time.time())
    sample = {"i": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "util": 50.0, "fb_used": 40000,
              "fb_total": 81559, "temp": 60.0, "power": 400.0}
    for t in range(now - 24 * 3600, now + 1, 5):
        services.ingest(node, check_report(float(t), [{**sample, "i": i} for i in range(gpus)], []), conn) if t == now \
            else services.ingest(node, check_report(float(t), [sample], []), conn)
    ring = conn.memory_usage(store.gpu_key(node, 0))
    latest = conn.memory_usage(store.latest_key(node))
    return {"ring_payload_bytes": store.RING_BYTES, "ring_redis_bytes": ring,
            "latest_redis_bytes_per_gpu": round(latest / gpus), "bytes_per_gpu": ring + round(latest / gpus)}


def time_metrics(scrapes: int) -> dict:
    from django.test import Client

    client = Client()
    times, size = [], 0
    for _ in range(scrapes):
        t0 = time.perf_counter()
        answer = client.get("/metrics", HTTP_AUTHORIZATION="Bearer bench-metrics")
        times.append(time.perf_counter() - t0)
        assert answer.status_code == 200, answer.status_code
        size = len(answer.content)
    return {"scrapes": scrapes, "median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3),
            "body_bytes": size, "dcgm_util_series": answer.content.count(b"\nDCGM_FI_DEV_GPU_UTIL{")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=5.0, help="the agents' --telemetry-interval")
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--idle-reclaim", action="store_true",
                        help="with idle reclaim on (GpuPolicy.idle_after_s = 600): ingestion also keeps the idle marks")
    parser.add_argument("--worker", action="store_true",
                        help="also send the reports through a real Celery worker, as agents do, and take its CPU")
    parser.add_argument("--worker-pool", default="prefork", choices=("prefork", "solo", "threads"),
                        help="the worker's pool for --worker (the deployment's is prefork)")
    parser.add_argument("--worker-path", nargs="+", default=["stream", "task"], choices=("stream", "task"),
                        help="for --worker: through the telemetry stream (agents with a Redis broker), as one "
                             "Celery task per report (other agents), or both, one after the other")
    parser.add_argument("--auth", default="signature", choices=("signature", "token"),
                        help="reports signed with the node's token, as agents send them (default), or carrying the "
                             "token, as agents older than signing did")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = parser.parse_args(argv)
    url = bench_url()
    recreate_database(url)
    import tempfile

    try:
        setup_django(url)
        import logging

        logging.disable(logging.WARNING)
        from gputelemetry import services, store

        conn = services.client()
        names = make_cluster(args.nodes, args.gpus)
        from cluster.models import GpuPolicy

        GpuPolicy.objects.create(pk=1, idle_after_s=600 if args.idle_reclaim else 0)
        with tempfile.TemporaryDirectory() as tmp:
            rounds = make_reports(names, args.gpus, args.rounds, args.interval, Path(tmp), args.auth)
        result = {
            "nodes": args.nodes, "gpus_per_node": args.gpus, "interval_s": args.interval,
            "idle_reclaim": args.idle_reclaim, "auth": args.auth,
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "ingestion": time_ingestion(rounds, args.interval, conn),
            "memory": measure_memory(conn, args.gpus),
            "metrics": time_metrics(args.scrapes),
        }
        if args.worker:
            result["worker"] = [{"pool": args.worker_pool,
                                 **time_worker(rounds, args.interval, conn, url, args.worker_pool, path)}
                                for path in args.worker_path]
    finally:
        try:
            from gputelemetry import services, store

            from scheduler import idleness

            services.client().delete(idleness.IDLE_KEY, idleness.WARNED_KEY)
            keys = list(services.client().scan_iter(match=f"{store.PREFIX}:*", count=1000))
            for k in range(0, len(keys), 1000):
                services.client().delete(*keys[k:k + 1000])
        except Exception:  # Django never came up: nothing was written
            pass
        from django import db

        db.connections.close_all()
        drop_database(url)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

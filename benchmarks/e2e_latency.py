"""TE submit-to-RUNNING latency on a live local cluster: idle, and full (through a preemption).

Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gs_loop REDIS_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python benchmarks/e2e_latency.py [--idle-samples 120] [--preempt-samples 30]
        [--nodes 2] [--gpus 4] [--grace 2] [--json FILE]

It builds a fresh database ``<DATABASE_URL name>_e2e_bench`` (created and
migrated at the start, dropped at the end), then starts what a deployment runs: one Celery worker
with embedded beat (``celery -A portal worker -B``, prefork, 2 processes, the
production settings module) and ``--nodes`` agents (``python -m
cluster.agent``) with ``--gpus`` virtual GPUs each. Jobs are submitted in this
process through ``scheduler.services.submit_job`` (what the API and form call),
so every cycle is triggered the way a real submission triggers it.

Latency of a job = its RUNNING event's time (written when the worker handles
the agent's REPORT_STARTED) minus its ``submitted_at``: both are server-side
timestamps, so polling adds no error. ``idle_submit_to_starting_ms`` stops at
the STARTING event (the cycle's commit, just before AGENT_LAUNCH is sent),
splitting the idle latency into scheduling and launch-plus-report.

* idle: one 1-GPU TE job (``sleep 0.3``) at a time on an otherwise empty
  cluster; the next one is submitted when the previous one is RUNNING.
* preempt: every GPU runs a BE job that ignores SIGTERM, with a grace period of
  ``--grace`` s, so each preemption takes the full grace period (the agent's
  SIGKILL ends it): the worst case a TE job can meet. A 1-GPU TE job is
  submitted; the policy (settings default, fitgpp) preempts one victim; the
  TE job's latency minus the victim's grace period is the system's own
  overhead. The victim, requeued, is then cancelled and replaced by a fresh BE
  job so the next sample again finds a full cluster of never-preempted jobs.

Confined mode (``--confined USER``, as root; docs/agent.md "Confinement"): the
agents run without ``--single-user``, so every job runs as its owner in a
cgroup of its attempt; the benchmark's portal user is named ``USER`` (an
existing POSIX account of this machine, uid >= 1000), which the server sends as
``run_as``. ``--image TARBALL`` (with ``--confined``) registers the root
filesystem tarball as an image and runs every job in it under bubblewrap; one
job is run first so that every node has it unpacked, so the figures are those
of a cached image. Without ``--confined`` the agents run in single-user mode.

Everything started is stopped at the end (process groups, then SIGKILL).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.procs import kill_group, kill_job_groups  # noqa: E402

PY = sys.executable
WAIT = 120.0  # a guard against hanging, not a target
HEARTBEAT = 1.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idle-samples", type=int, default=120)
    p.add_argument("--preempt-samples", type=int, default=30)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--gpus", type=int, default=4, help="virtual GPUs per agent")
    p.add_argument("--grace", type=float, default=2.0, help="grace period of the BE victims (s)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--confined", metavar="USER", default="",
                   help="agents confine jobs (root needed); jobs run as the POSIX account USER")
    p.add_argument("--image", type=Path, help="with --confined: every job runs in this root filesystem tarball")
    args = p.parse_args(argv)
    if args.image is not None and not args.confined:
        p.error("--image needs --confined USER")
    for name in ("idle_samples", "nodes", "gpus"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.preempt_samples < 0:
        p.error("--preempt-samples must be >= 0 (0: idle samples only)")
    if args.grace < 0:
        p.error("--grace must be >= 0")
    return args


# --- environment --------------------------------------------------------------------


def bench_database_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    parsed = urlparse(url)
    if not parsed.scheme.startswith("postgres"):
        raise SystemExit("DATABASE_URL must name a PostgreSQL database (postgres://...)")
    return parsed._replace(path=f"/{parsed.path.lstrip('/')}_e2e_bench").geturl()


def recreate_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin = psycopg.connect(host=parsed.hostname, port=parsed.port or 5432, user=parsed.username,
                            password=parsed.password, dbname="postgres", autocommit=True)
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    admin = psycopg.connect(host=parsed.hostname, port=parsed.port or 5432, user=parsed.username,
                            password=parsed.password, dbname="postgres", autocommit=True)
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{parsed.path.lstrip("/")}" WITH (FORCE)')


def server_env(database_url: str, redis_url: str, confined: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
    env.update({
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "SECRET_KEY": env.get("SECRET_KEY") or "benchmark-only-secret-key",
        "SCHEDULER_AUTORUN": "1",
        "AGENT_HEARTBEAT_SECONDS": str(HEARTBEAT),
        "GPUSCHED_AGENT_TOKEN": "bench-token",
        "GPUSCHED_AGENT_DEV_MODE": "true",  # one shared token for the benchmark's agents
        "LOG_LEVEL": "WARNING",
        # The server's side of single-user mode: launches name nobody when the agents run every job as themselves.
        "GPUSCHED_SINGLE_USER": "0" if confined else "1",
    })
    return env


class Processes:
    """Background processes in their own sessions, all killed by ``stop_all``."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        out = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            kill_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_until(predicate, what: str, timeout: float = WAIT):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.02)


# --- measurements ---------------------------------------------------------------------


def percentiles(values_ms: list[float]) -> dict[str, float]:
    import numpy as np

    arr = np.asarray(values_ms, dtype=float)
    return {"p50": round(float(np.percentile(arr, 50)), 1), "p95": round(float(np.percentile(arr, 95)), 1),
            "max": round(float(arr.max()), 1), "min": round(float(arr.min()), 1)}


def latency_ms(job_id: int, state: str = "RUNNING") -> float | None:
    """Milliseconds from the job's submission to its first event into ``state`` (None: not yet)."""
    from scheduler.models import Job, JobEvent

    at = JobEvent.objects.filter(job_id=job_id, to_state=state).order_by("at").values_list("at", flat=True).first()
    if at is None:
        return None
    return (at - Job.objects.get(pk=job_id).submitted_at).total_seconds() * 1000


def register_image(tarball: Path) -> str:
    """Register ``tarball`` as the image "bench" (the server's image registry); return its name."""
    import hashlib

    try:
        from scheduler.images import Image
    except ImportError:
        raise SystemExit("--image needs a server with an image registry (scheduler.images)") from None
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    Image.objects.create(name="bench", uri=str(tarball.resolve()), digest=f"sha256:{digest}")
    return "bench"


def job_request(image: str, **fields):  # noqa: ANN003, ANN201
    """A JobRequest naming ``image`` when one is given (older servers have no image field)."""
    from scheduler.services import JobRequest

    return JobRequest(**fields, **({"image": image} if image else {}))


def warm_image(user, image: str, nodes: int) -> None:  # noqa: ANN001
    """Run one job per node in ``image`` so that every node has unpacked it (the measured launches are cached)."""
    from scheduler.models import Job, JobState
    from scheduler.services import submit_job

    jobs = [submit_job(user, job_request(image, name=f"warm-{i}", command="true", job_class="BE", num_gpus=4,
                                         grace_period=1)) for i in range(nodes)]
    wait_until(lambda: Job.objects.filter(pk__in=[j.pk for j in jobs], state=JobState.COMPLETED).count() == len(jobs),
               "the image to be unpacked on every node", timeout=WAIT * 5)


def measure_idle(user, samples: int, image: str = "") -> tuple[list[float], list[float]]:  # noqa: ANN001
    """(submit -> RUNNING, submit -> STARTING) per sample; STARTING is when the cycle committed the start."""
    from scheduler.services import submit_job

    running, starting = [], []
    for i in range(samples):
        job = submit_job(user, job_request(image, name=f"idle-{i}", command="sleep 0.3", job_class="TE", num_gpus=1,
                                           grace_period=1))
        running.append(wait_until(lambda: latency_ms(job.pk), f"idle TE job {job.pk} to run"))
        starting.append(latency_ms(job.pk, "STARTING"))
    return running, starting


def cluster_full(total_gpus: int) -> bool:
    from cluster.models import Gpu
    from scheduler.models import Job, JobState

    busy = Gpu.objects.filter(allocated_to__state=JobState.RUNNING, allocated_to__job_class="BE").count()
    return busy == total_gpus and not Job.objects.filter(state__in=[JobState.PREEMPTING, JobState.STARTING]).exists()


def measure_preempt(user, samples: int, total_gpus: int, grace: float) -> tuple[list[float], list[float]]:  # noqa: ANN001
    from scheduler.models import Job, JobState
    from scheduler.services import JobRequest, cancel_job, submit_job

    be = JobRequest(name="be", command="trap '' TERM; exec sleep 100000", job_class="BE", num_gpus=1,
                    grace_period=int(grace))
    for _ in range(total_gpus):
        submit_job(user, be)
    raw, minus_grace = [], []
    for i in range(samples):
        wait_until(lambda: cluster_full(total_gpus), "a cluster full of running BE jobs")
        te = submit_job(user, JobRequest(name=f"te-{i}", command="sleep 0.3", job_class="TE", num_gpus=1,
                                         grace_period=1))
        latency = wait_until(lambda: latency_ms(te.pk), f"TE job {te.pk} to run", timeout=WAIT + grace)
        (victim,) = wait_until(
            lambda: list(Job.objects.filter(job_class="BE", preemption_count=1, state=JobState.PENDING)),
            "the victim to be requeued",
        )
        raw.append(latency)
        minus_grace.append(latency - victim.grace_period * 1000)
        cancel_job(victim, user)
        submit_job(user, be)
        wait_until(lambda: Job.objects.filter(pk=te.pk, state=JobState.COMPLETED).exists(), f"TE job {te.pk} to end")
    return raw, minus_grace


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    database_url = bench_database_url()
    recreate_database(database_url)
    env = server_env(database_url, redis_url, confined=bool(args.confined))
    os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "SECRET_KEY",
                                           "SCHEDULER_AUTORUN", "AGENT_HEARTBEAT_SECONDS", "LOG_LEVEL",
                                           "GPUSCHED_SINGLE_USER")})
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import redis

    client = redis.Redis.from_url(redis_url)
    client.delete("celery", "unacked", "unacked_index", "gpusched:scheduler:cycle-lock",
                  "gpusched:scheduler:cycle-requested")

    tmp = Path(tempfile.mkdtemp(prefix="e2e-bench-"))
    os.chmod(tmp, 0o711)  # confined jobs' users pass through to their own directories
    procs = Processes(tmp)
    tag = uuid.uuid4().hex[:6]
    names = {f"bench{i}-{tag}" for i in range(args.nodes)}
    started = time.time()
    try:
        procs.start("worker", [PY, "-m", "celery", "-A", "portal", "worker", "-B", "--schedule", str(tmp / "beat"),
                               "--queues", "celery", "--concurrency", "2", "--hostname", f"bench-{tag}@%h",
                               "--without-gossip", "--without-mingle", "--loglevel", "WARNING"], env)
        for name in sorted(names):
            procs.start(name, [PY, "-m", "cluster.agent", "--name", name, "--gpus", str(args.gpus),
                               "--workdir", str(tmp / name), "--heartbeat", str(HEARTBEAT),
                               *([] if args.confined else ["--single-user"])], env)
        from cluster.models import Node

        wait_until(lambda: Node.objects.filter(name__in=names, state="UP").count() == len(names), "agents to register")
        # Confined: the portal user is named after the POSIX account, which the server sends as run_as.
        user = User.objects.create_user(args.confined or f"bench-{tag}", password=uuid.uuid4().hex)
        image = register_image(args.image) if args.image is not None else ""
        if image:
            warm_image(user, image, args.nodes)
        idle, idle_starting = measure_idle(user, args.idle_samples, image)
        raw, minus_grace = (measure_preempt(user, args.preempt_samples, args.nodes * args.gpus, args.grace)
                            if args.preempt_samples else ([], []))
    finally:
        procs.stop_all()
        kill_job_groups(names)
        for name in names:
            client.delete(f"node.{name}", f"_kombu.binding.node.{name}", f"_kombu.binding_permanent.node.{name}")
        from django.db import connections

        connections.close_all()
        drop_database(database_url)
    result = {
        "samples": {"idle": len(idle), "preempt": len(raw)},
        "idle_submit_to_running_ms": percentiles(idle),
        "idle_submit_to_starting_ms": percentiles(idle_starting),
        "preempt_submit_to_running_minus_grace_ms": percentiles(minus_grace) if raw else None,
        "preempt_submit_to_running_ms": percentiles(raw) if raw else None,
        "victim_grace_period_s": args.grace,
        "cluster": {"nodes": args.nodes, "gpus_per_node": args.gpus},
        "confined_as": args.confined or None,
        "image": str(args.image) if args.image is not None else None,
        "policy": os.environ.get("SCHEDULER_POLICY", "fitgpp"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "wall_seconds": round(time.time() - started, 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

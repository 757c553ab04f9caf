"""Progress-report latency: a job's ``gpusched.job.progress()`` call until the open job page receives it.

Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python benchmarks/progress_latency.py [--samples 20] [--gap 1.5] [--json FILE]

Builds a fresh database ``<DATABASE_URL name>_e2e_bench`` (dropped at the end) and starts what a
deployment runs: a Celery worker with embedded beat, one node agent (1 virtual GPU) and the
portal under daphne. A job is submitted whose command waits 5 s, then reports ``step = 1..samples`` through
``gpusched.job``, one report every ``--gap`` seconds (more than the agent's one-per-second
forwarding limit, so each report travels on its own). The job page is open in Debian's
Chromium (Playwright); the page records the arrival time (``Date.now()``) of every WebSocket
message. Latency of a report = arrival of the first ``progress`` message carrying its step
minus the time the job wrote it (the report's ``t``, which the page receives as
``reported_at``); both clocks are this machine's.

What is measured: the job's write, the agent's next poll (it polls with its log streaming,
every ``--log-interval``, default 0.5 s), the report through the outbox and Redis to a worker,
the database write, the on-commit hint through the channel layer, the consumer's coalescing
delay (``portal.consumers.DEBOUNCE_S``), the progress query and the WebSocket send.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.dashboard_push import CHROMIUM_ARGS, RECORDER, free_port  # noqa: E402
from benchmarks.e2e_latency import (  # noqa: E402
    PY, Processes, bench_database_url, drop_database, percentiles, recreate_database, server_env, wait_until,
)
from tests.support.procs import kill_job_groups  # noqa: E402

JOB = ("{py} -c 'import time; from gpusched import job\n"
       "time.sleep(5)\n"
       "for i in range(1, {n} + 1):\n"
       "    job.progress(step=i, total_steps={n}, metrics={{\"loss\": 1.0 / i}}); time.sleep({gap})\n"
       "time.sleep(5)'")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--gap", type=float, default=1.5, help="seconds between reports (> the 1 s forwarding limit)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = parser.parse_args(argv)
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    database_url = bench_database_url()
    recreate_database(database_url)
    env = server_env(database_url, redis_url)
    os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "SECRET_KEY",
                                           "SCHEDULER_AUTORUN", "LOG_LEVEL")})
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop; ORM calls stay blocking
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from playwright.sync_api import sync_playwright

    from cluster.models import Node
    from scheduler import services
    from scheduler.services import JobRequest

    call_command("migrate", verbosity=0)
    tmp = Path(tempfile.mkdtemp(prefix="progress-bench-"))
    procs = Processes(tmp)
    tag = uuid.uuid4().hex[:6]
    node = f"bench-{tag}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    latencies: list[float] = []
    started = time.time()
    try:
        procs.start("worker", [PY, "-m", "celery", "-A", "portal", "worker", "-B", "--schedule", str(tmp / "beat"),
                               "--queues", "celery", "--concurrency", "2", "--hostname", f"bench-{tag}@%h",
                               "--without-gossip", "--without-mingle", "--loglevel", "WARNING"], env)
        procs.start(node, [PY, "-m", "cluster.agent", "--name", node, "--gpus", "1", "--workdir", str(tmp / node),
                           "--heartbeat", "1"], env)
        procs.start("web", [PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"], env)
        wait_until(lambda: Node.objects.filter(name=node, state="UP").exists(), "the agent to register")
        wait_until(lambda: _answers(base + "/accounts/login/"), "daphne to answer")
        password = uuid.uuid4().hex
        hasher = PBKDF2PasswordHasher()
        user = User.objects.create_user(f"bench-{tag}")
        user.password = hasher.encode(password, hasher.salt(), iterations=1000)
        user.save(update_fields=["password"])
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            context = browser.new_context(base_url=base)
            context.add_init_script(RECORDER)
            page = context.new_page()
            page.goto("/accounts/login/")
            page.fill("input[name=username]", user.username)
            page.fill("input[name=password]", password)
            page.click("main button[type=submit]")
            page.wait_for_url("**/jobs/")
            command = JOB.format(py=PY, n=args.samples, gap=args.gap)
            job = services.submit_job(user, JobRequest(name="progress-bench", command=command, job_class="TE",
                                                       num_gpus=1))
            page.goto(f"/jobs/{job.pk}/")
            page.wait_for_selector("#live-status[data-state=live]")
            live_ms = page.evaluate("Date.now()")
            page.wait_for_function(f"window.__arrivals.some(([, d]) => d.includes('\"step\": {args.samples},'))",
                                   timeout=60_000 + 3_000 * args.samples * args.gap)
            arrivals = page.evaluate("window.__arrivals")
            browser.close()
        latencies = first_arrivals(arrivals, live_ms)
    finally:
        procs.stop_all()
        kill_job_groups({node})
        import redis

        redis.Redis.from_url(redis_url).delete(f"node.{node}", f"_kombu.binding.node.{node}")
        from django.db import connections

        connections.close_all()
        drop_database(database_url)
    result = {
        "samples": len(latencies),
        "write_to_page_ms": percentiles(latencies),
        "gap_s": args.gap,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "wall_seconds": round(time.time() - started, 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


def first_arrivals(arrivals: list, live_ms: float) -> list[float]:
    """For each step written after the page's socket was live, the first page message carrying it:
    arrival minus the job's write time, in ms (reports written before are sent with the page's
    initial state and would measure the page load)."""
    seen: dict[int, float] = {}
    for arrived_ms, data in arrivals:
        message = json.loads(data)
        progress = message.get("progress") if message.get("type") == "progress" else None
        if not progress or progress.get("step") is None or progress["step"] in seen or not progress["reported_at"]:
            continue
        written = datetime.fromisoformat(progress["reported_at"]).timestamp() * 1000.0
        if written >= live_ms:
            seen[progress["step"]] = arrived_ms - written
    return list(seen.values())


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())

"""Click to a usable notebook on an idle cluster, in Chromium: p50/p95, and JupyterLab's own share.

Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python benchmarks/session_start.py [--samples 20] [--json FILE]

Starts what a deployment runs, on a fresh database ``<DATABASE_URL name>_e2e_bench``
(created, migrated, dropped at the end, as ``benchmarks/e2e_latency.py``
does, whose functions it reuses): a Celery worker with beat, one agent (single-user, 2 virtual GPUs,
JupyterLab on its PATH from this interpreter's environment) and the portal
under daphne (``portal.asgi``). Debian's Chromium, driven by Playwright, logs
in and then, ``--samples`` times on an idle cluster:

1. opens "Start a notebook", and starts the clock when it clicks "Start";
2. waits on the job page until "Open" appears (the agent has reported the
   session's server answering), loads JupyterLab through the portal's proxy;
3. runs a cell through JupyterLab's REST API and kernel websocket, from the
   page, through the proxy (``tests/support/notebook.py``), and stops the clock
   when the cell's output has arrived;

then stops the session and waits until its GPU is free again. Reported, per
sample: the total (click to output), and its parts: click to the job RUNNING
(scheduling and launch), JupyterLab's start-up (the attempt's start on the
node to its port answering, as the server stored it), until "Open" shows,
loading the lab page, and kernel start plus the cell. Everything started is
stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from e2e_latency import (  # noqa: E402
    PY, HEARTBEAT, Processes, bench_database_url, drop_database, percentiles, recreate_database, server_env, wait_until,
)
from tests.support.notebook import RUN_CELL  # noqa: E402
from tests.support.procs import kill_job_groups  # noqa: E402

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--no-first-run"]
CELL = "import os\nprint('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'])\n"
PASSWORD = uuid.uuid4().hex


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_sample(page, base: str) -> dict[str, float]:  # noqa: ANN001
    """Click "Start" to the cell's output; the parts in seconds (the job's are from the server's clock)."""
    from interactive.models import SessionEndpoint
    from scheduler.models import Attempt, Job, JobEvent

    page.goto(base + "/sessions/new/")
    page.select_option("#id_kind", "jupyter")
    page.fill("#id_num_gpus", "1")
    page.fill("#id_time_limit", "900")
    t0 = time.monotonic()
    page.click("#start-session")
    page.wait_for_url("**/jobs/*/")
    job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    page.wait_for_selector("#session-open:not([hidden])", timeout=120_000)
    t_open = time.monotonic()
    page.goto(base + page.get_attribute("#session-open", "href"), wait_until="load")
    t_lab = time.monotonic()
    result = page.evaluate(RUN_CELL, [f"/sessions/{job_id}/", CELL])
    t_done = time.monotonic()
    if "error" in result or "gpus=" not in result["out"]:
        raise SystemExit(f"the cell did not run: {result}")
    job = Job.objects.get(pk=job_id)
    running = JobEvent.objects.filter(job=job, to_state="RUNNING").order_by("at").values_list("at", flat=True).first()
    started = Attempt.objects.get(job=job, number=1).started_at
    ready = SessionEndpoint.objects.get(job=job).ready_at
    return {"job": job_id, "total": t_done - t0, "click_to_running": (running - job.submitted_at).total_seconds(),
            "jupyterlab_startup": (ready - started).total_seconds(), "click_to_open_shown": t_open - t0,
            "lab_page_load": t_lab - t_open, "kernel_and_cell": t_done - t_lab}


def stop(job_id: int, user) -> None:  # noqa: ANN001
    from cluster.models import Gpu
    from scheduler import services
    from scheduler.models import Job

    services.cancel_job(Job.objects.get(pk=job_id), user)
    wait_until(lambda: Job.objects.get(pk=job_id).state == "CANCELLED"
               and not Gpu.objects.filter(allocated_to_id=job_id).exists(), "the session to stop")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    database_url = bench_database_url()
    recreate_database(database_url)
    env = server_env(database_url, redis_url)
    env["PATH"] = f"{Path(PY).parent}{os.pathsep}{env.get('PATH', '')}"  # the node's documented JupyterLab
    os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "SECRET_KEY",
                                           "SCHEDULER_AUTORUN", "LOG_LEVEL", "GPUSCHED_SINGLE_USER")})
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's loop shares this thread with the ORM calls
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from playwright.sync_api import sync_playwright

    call_command("migrate", verbosity=0)
    tmp = Path(tempfile.mkdtemp(prefix="session-bench-"))
    procs, tag, port = Processes(tmp), uuid.uuid4().hex[:6], free_port()
    name, base, samples = f"nb-{tag}", f"http://127.0.0.1:{port}", []
    started = time.time()
    try:
        procs.start("worker", [PY, "-m", "celery", "-A", "portal", "worker", "-B", "--schedule", str(tmp / "beat"),
                               "--queues", "celery", "--concurrency", "2", "--hostname", f"bench-{tag}@%h",
                               "--without-gossip", "--without-mingle", "--loglevel", "WARNING"], env)
        procs.start(name, [PY, "-m", "cluster.agent", "--name", name, "--gpus", "2", "--workdir", str(tmp / name),
                           "--heartbeat", str(HEARTBEAT), "--single-user"], env)
        procs.start("daphne", [PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"], env)
        from cluster.models import Node

        wait_until(lambda: Node.objects.filter(name=name, state="UP").exists(), "the agent to register")
        user = User.objects.create_user(f"bench-{tag}", password=PASSWORD)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_context().new_page()
            wait_until(lambda: _answers(base), "the portal to answer")
            page.goto(base + "/accounts/login/")
            page.fill("input[name=username]", user.username)
            page.fill("input[name=password]", PASSWORD)
            page.click("main button[type=submit]")
            page.wait_for_url("**/jobs/")
            for _ in range(args.samples):
                sample = one_sample(page, base)
                samples.append(sample)
                stop(sample["job"], user)
            browser.close()
    finally:
        procs.stop_all()
        kill_job_groups({name})
        from django.db import connections

        connections.close_all()
        drop_database(database_url)
    parts = ["total", "click_to_running", "jupyterlab_startup", "click_to_open_shown", "lab_page_load", "kernel_and_cell"]
    result = {
        "samples": len(samples),
        **{f"{part}_ms": percentiles([s[part] * 1000 for s in samples]) for part in parts},
        "jupyterlab_share_of_total_median": round(sorted(s["jupyterlab_startup"] / s["total"] for s in samples)[len(samples) // 2], 3),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "wall_seconds": round(time.time() - started, 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


def _answers(base: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(base + "/accounts/login/", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())

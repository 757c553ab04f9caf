"""Push latency of the live cluster page: a committed change until the page's WebSocket delivers it.

Starts the portal under daphne (``portal.asgi``) on the database and Redis of
the environment (``DATABASE_URL``, ``REDIS_URL``; migrations applied), opens
the cluster page in Debian's Chromium through Playwright as a throw-away user,
and then, ``--samples`` times: creates a node row (committed; the realtime
signal publishes a hint), notes the wall-clock time right after the commit,
and waits for the page's WebSocket message that contains the new node. The
browser records the arrival time (``Date.now()``) in the page; both clocks are
this machine's.

What is measured: on-commit hint to Redis, channel-layer delivery to the
consumer, its coalescing delay (``portal.consumers.DEBOUNCE_S``), the
``cluster_state`` query, and the WebSocket send to the browser. The rows it
creates are removed at the end.

    .venv/bin/python benchmarks/dashboard_push.py --samples 50 --json push.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("SECRET_KEY", "benchmark-only-secret-key")
# Playwright's sync API keeps an event loop in this thread; the ORM calls between steps are plain blocking calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--no-first-run"]
RECORDER = """
window.__arrivals = [];
const NativeWebSocket = window.WebSocket;
window.WebSocket = class extends NativeWebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener("message", (e) => window.__arrivals.push([Date.now(), e.data]));
  }
};
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    from scheduler.core.metrics import percentile as pct

    return pct(sorted(values), q)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between changes (> the coalescing delay)")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--server-log", metavar="FILE", help="write daphne's output here (default: discarded)")
    args = parser.parse_args()
    if args.samples < 1:
        parser.error("--samples must be >= 1")

    import django

    django.setup()
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.contrib.auth.models import User
    from playwright.sync_api import sync_playwright

    from cluster.models import Node
    from portal import consumers

    tag = uuid.uuid4().hex[:8]
    password = uuid.uuid4().hex
    hasher = PBKDF2PasswordHasher()
    user = User.objects.create_user(f"bench-{tag}", None, None)
    user.password = hasher.encode(password, hasher.salt(), iterations=1000)
    user.save(update_fields=["password"])

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(args.server_log, "wb") if args.server_log else subprocess.DEVNULL
    web = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
                           cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    latencies: list[float] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/accounts/login/", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or web.poll() is not None:
                    raise SystemExit("daphne did not start")
                time.sleep(0.2)
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
            page.goto("/cluster/")
            page.wait_for_selector("#live-status[data-state=live]")
            for i in range(args.samples):
                name = f"bench-{tag}-{i}"
                Node.objects.create(name=name, gpus=1)  # autocommit: committed when this returns
                committed_ms = time.time() * 1000.0
                needle = f'"name": "{name}"'
                page.wait_for_function(
                    "needle => window.__arrivals.some(([, data]) => data.includes(needle))", arg=needle, timeout=30000
                )
                arrival = page.evaluate(
                    "needle => window.__arrivals.find(([, data]) => data.includes(needle))[0]", needle
                )
                latencies.append(arrival - committed_ms)
                time.sleep(args.gap)
            browser.close()
    finally:
        os.killpg(web.pid, 15)
        web.wait(timeout=30)
        Node.objects.filter(name__startswith=f"bench-{tag}-").delete()
        user.delete()

    result = {
        "samples": len(latencies),
        "push_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95), "max": max(latencies)},
        "debounce_ms": consumers.DEBOUNCE_S * 1000.0,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

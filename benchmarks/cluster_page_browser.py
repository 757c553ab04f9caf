"""The cluster page's first draw in a real browser at scale: from navigation to every GPU cell shown.

Fills a fresh database as ``benchmarks/cycle_scale.py`` does (``--nodes`` N of 8 GPUs, 90 % held by
running jobs, ten pending jobs per node), starts the portal under daphne on it, logs in with Debian's
Chromium through Playwright and loads ``/cluster/`` ``--repeat`` times, reporting per load (medians):

* ``first_draw_ms``: from the navigation's start to the grid holding a cell for every GPU;
* ``live_ms``: to the page's socket being live (its first whole state received and drawn);
* ``long_tasks_ms``: main-thread tasks over 50 ms until then, summed (a ``PerformanceObserver``);
* with ``--profile``: the page's own functions by self time over one more load (Chrome's CPU
  profiler through the DevTools protocol), so that what a change saves is seen where it is spent.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python benchmarks/cluster_page_browser.py --nodes 1000 --json page_draw.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cycle_scale import _fill, django_on_fresh_database  # noqa: E402
from benchmarks.dashboard_push import CHROMIUM_ARGS, free_port  # noqa: E402

LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
  .observe({ type: "longtask", buffered: true });
"""


def _user() -> tuple[str, str]:
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.contrib.auth.models import User

    password = uuid.uuid4().hex
    hasher = PBKDF2PasswordHasher()
    user = User.objects.create_user(f"bench-{uuid.uuid4().hex[:8]}", None, None)
    user.password = hasher.encode(password, hasher.salt(), iterations=1000)
    user.save(update_fields=["password"])
    return user.username, password


def _serve(port: int) -> subprocess.Popen:
    web = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).close()
            return web
        except OSError:
            if time.monotonic() > deadline or web.poll() is not None:
                raise SystemExit("daphne did not start")
            time.sleep(0.2)


def _load(page, gpus: int) -> dict:  # noqa: ANN001 - a Playwright page
    page.goto("/cluster/", wait_until="commit")
    page.wait_for_function("n => document.querySelectorAll('#grid .gpu').length >= n", arg=gpus, timeout=120_000)
    drawn = page.evaluate("performance.now()")
    page.wait_for_selector("#live-status[data-state=live]", timeout=120_000)
    page.wait_for_timeout(500)  # the whole state the socket sends first, drawn
    live = page.evaluate("performance.now()")
    long_tasks = page.evaluate("window.__longTasks.reduce((a, b) => a + b, 0)")
    return {"first_draw_ms": round(drawn, 1), "live_ms": round(live - 500, 1), "long_tasks_ms": round(long_tasks, 1)}


def _profile(context, page, gpus: int, top: int = 15) -> list[dict]:  # noqa: ANN001
    """Self time of the page's functions over one load (sampled every 100 microseconds)."""
    cdp = context.new_cdp_session(page)
    cdp.send("Profiler.enable")
    cdp.send("Profiler.setSamplingInterval", {"interval": 100})
    cdp.send("Profiler.start")
    _load(page, gpus)
    profile = cdp.send("Profiler.stop")["profile"]
    frames = {n["id"]: n["callFrame"] for n in profile["nodes"]}
    self_us: Counter[str] = Counter()
    for node_id, delta in zip(profile["samples"], profile["timeDeltas"]):
        frame = frames[node_id]
        where = Path(frame["url"]).name or frame["url"] or "(native)"
        self_us[f"{frame['functionName'] or '(anonymous)'} {where}:{frame['lineNumber'] + 1}"] += delta
    return [{"function": name, "self_ms": round(us / 1000, 1)} for name, us in self_us.most_common(top)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pending-per-node", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="add the page's functions by self time")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    django_on_fresh_database(parser)
    counts = _fill(args.nodes, args.nodes * args.pending_per_node, args.seed)
    username, password = _user()
    port = free_port()
    web = _serve(port)
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            context = browser.new_context(base_url=f"http://127.0.0.1:{port}")
            context.add_init_script(LONG_TASKS)
            page = context.new_page()
            page.goto("/accounts/login/")
            page.fill("input[name=username]", username)
            page.fill("input[name=password]", password)
            page.click("main button[type=submit]")
            page.wait_for_url("**/jobs/")
            loads = [_load(page, counts["gpus"]) for _ in range(args.repeat)]
            profile = _profile(context, page, counts["gpus"]) if args.profile else None
            browser.close()
    finally:
        os.killpg(web.pid, 15)
        web.wait(timeout=30)
    result = {**counts, "loads": loads,
              **{key: round(statistics.median(load[key] for load in loads), 1)
                 for key in ("first_draw_ms", "live_ms", "long_tasks_ms")},
              "profile": profile}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "cluster_page_browser", "results": [result]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

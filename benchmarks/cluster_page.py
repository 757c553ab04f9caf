"""The cluster page's state at scale: what one read costs the portal and how much it sends.

Every open cluster page gets the whole state again after each change (coalesced per 100 ms,
``portal.consumers``), read for its viewer by ``portal.dashboard.selectors.cluster_state``; the page's
first load embeds the same state. For each size (``--nodes`` N of 8 GPUs, ``--pending-per-node``
times N pending jobs) a fresh database is filled as ``benchmarks/cycle_scale.py`` fills it (90 % of
the GPUs held by running BE jobs of 1-8 GPUs, the queue of 20 users), then reports:

* ``state_s`` and ``state_staff_s``: one ``cluster_state`` read for a user and for staff (median of
  ``--repeat``; staff get a link for every job);
* ``state_kib``: the state as JSON (what one push sends to one page), and its parts ``nodes_kib``
  (the grid), ``jobs_kib`` (the jobs holding GPUs, when the state lists them apart) and ``queue_kib``;
* ``page_s``: the whole ``GET /cluster/`` through Django's test client (median of ``--repeat``), and
  ``page_shared_s`` the same while a current shared state is stored in Redis (``portal.cluster_cache``);
* ``shared_read_s``, ``from_other_process_s`` and ``store_s``: what each further portal process pays
  for the shared state after a change, its own read of the database against the state another process
  stored in Redis (``portal.cluster_cache``), and what the reading process adds to store it;
* ``per_page_s``: what each open page adds to one shared read after a change (``selectors.for_viewer``
  on the shared state and the JSON of the message; trees without a shared read: null), so that K open
  pages cost ``state_s + K x per_page_s`` where each once read for itself;
* for a page that asks for changes (``/ws/cluster/?changes=1``; trees without it: null):
  ``changes_quiet_kib``, what a push sends when nothing changed but the clock (the page's minute
  refresh), ``changes_ten_ended_kib``, what it sends after ten running jobs ended and freed their GPUs,
  ``changes_s``, the time to compare the two shared states (once per process per change, whatever the
  number of pages), and ``per_page_changes_s``, what each open page then adds (``changes_for_viewer``
  and the JSON; medians of ``--repeat``; trees that compared each page's own state: that comparison).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python benchmarks/cluster_page.py --nodes 100 1000 --json cluster_page.json

Runs on earlier commits too (``PYTHONPATH`` set to their tree), for a side-by-side table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cycle_scale import _fill, django_on_fresh_database  # noqa: E402


def _kib(value: object) -> float:
    return round(len(json.dumps(value)) / 1024, 1)


def _timed(call, repeat: int) -> float:  # noqa: ANN001 - a callable
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return round(statistics.median(times), 4)


def measure(nodes: int, pending: int, repeat: int, seed: int) -> dict:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    from portal.dashboard import selectors

    settings.CLUSTER_STATE_SHARED = False  # each figure below reads the database unless it says otherwise
    counts = _fill(nodes, pending, seed)
    user = User.objects.get(username="u0")
    staff = User.objects.create_user("bench-staff", is_staff=True)
    state = selectors.cluster_state(user)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    client = Client()
    client.force_login(user)
    answer = client.get("/cluster/")
    if answer.status_code != 200:
        raise SystemExit(f"/cluster/ answered {answer.status_code}")
    per_page = None
    if hasattr(selectors, "for_viewer"):
        shared = selectors.shared_cluster_state()
        per_page = _timed(lambda: json.dumps(selectors.for_viewer(shared, user)), repeat)
    return {
        **counts,
        **_across_processes(repeat),
        **_changes(user, repeat),
        "per_page_s": per_page,
        "state_s": _timed(lambda: selectors.cluster_state(user), repeat),
        "state_staff_s": _timed(lambda: selectors.cluster_state(staff), repeat),
        "state_kib": _kib(state), "nodes_kib": _kib(state["nodes"]), "jobs_kib": _kib(state.get("jobs", {})),
        "queue_kib": _kib(state["queue"]),
        "page_s": _timed(lambda: client.get("/cluster/"), repeat),
        "page_shared_s": _page_shared(client, repeat),
        "page_kib": round(len(answer.content) / 1024, 1),
    }


def _page_shared(client, repeat: int) -> float | None:  # noqa: ANN001 - Django's test client
    """``GET /cluster/`` while a current shared state is stored in Redis (``cluster_cache.stored_state``);
    trees without it: null."""
    try:
        from portal import cluster_cache
    except ImportError:
        return None
    if not hasattr(cluster_cache, "stored_state"):
        return None
    import asyncio

    from django.conf import settings

    from portal.dashboard import selectors

    settings.CLUSTER_STATE_SHARED = True
    try:
        state = selectors.shared_cluster_state()

        async def store() -> None:
            async def read() -> dict:
                return state
            await cluster_cache._read_and_store(cluster_cache._client(), read)

        asyncio.run(store())
        return _timed(lambda: client.get("/cluster/"), repeat)
    finally:
        settings.CLUSTER_STATE_SHARED = False


def _across_processes(repeat: int) -> dict:
    """What each further portal process pays for the shared state after a change: its own read of the
    database before (``shared_read_s``), the state another process stored in Redis now
    (``from_other_process_s``: Redis and the JSON decode), and what the process that reads adds to
    store it (``store_s``: the JSON encode and Redis). Trees without ``portal.cluster_cache``: nulls."""
    from portal.dashboard import selectors

    shared_read = _timed(selectors.shared_cluster_state, repeat)
    try:
        from portal import cluster_cache
    except ImportError:
        return {"shared_read_s": shared_read, "from_other_process_s": None, "store_s": None}
    import asyncio

    from django.conf import settings

    settings.CLUSTER_STATE_SHARED = True
    state = selectors.shared_cluster_state()

    async def read() -> dict:
        return state

    async def unread() -> dict:
        raise AssertionError("the state should have come from Redis")

    async def timings() -> tuple[float, float]:
        client = cluster_cache._client()
        stores, takes = [], []
        for _ in range(repeat):
            began = time.perf_counter()
            await cluster_cache._read_and_store(client, read)
            stores.append(time.perf_counter() - began)
            began = time.perf_counter()
            await cluster_cache.shared_state(unread)
            takes.append(time.perf_counter() - began)
        return statistics.median(stores), statistics.median(takes)

    store, take = asyncio.run(timings())
    settings.CLUSTER_STATE_SHARED = False
    return {"shared_read_s": shared_read, "from_other_process_s": round(take, 4), "store_s": round(store, 4)}


def _changes(user, repeat: int) -> dict:  # noqa: ANN001 - a user model instance
    """What a page that asks for changes is sent: after nothing but the clock moved, and after ten running
    jobs ended (their GPUs freed, their rows COMPLETED, as a cycle would leave them)."""
    try:
        from portal.dashboard import cluster_delta
    except ImportError:
        return {"changes_quiet_kib": None, "changes_ten_ended_kib": None, "changes_s": None,
                "per_page_changes_s": None}
    from django.utils import timezone

    from cluster.models import Gpu
    from portal.dashboard import selectors
    from scheduler.models import Job, JobState

    sent = selectors.shared_cluster_state()
    quiet = cluster_delta.changes(sent, selectors.shared_cluster_state())
    ended = list(Job.objects.filter(state=JobState.RUNNING).order_by("id").values_list("id", flat=True)[:10])
    Gpu.objects.filter(allocated_to_id__in=ended).update(allocated_to=None)
    Job.objects.filter(id__in=ended).update(state=JobState.COMPLETED, ended_at=timezone.now())
    new = selectors.shared_cluster_state()
    delta = cluster_delta.changes(sent, new)
    if hasattr(selectors, "changes_for_viewer"):
        per_page = lambda: json.dumps(selectors.changes_for_viewer(delta, user))  # noqa: E731
        seen = selectors.changes_for_viewer(delta, user)
    else:  # each page compared its own state
        viewer_sent = selectors.for_viewer(sent, user)
        per_page = lambda: json.dumps(cluster_delta.changes(viewer_sent, selectors.for_viewer(new, user)))  # noqa: E731
        seen = cluster_delta.changes(viewer_sent, selectors.for_viewer(new, user))
    return {
        "changes_quiet_kib": _kib(quiet),
        "changes_ten_ended_kib": _kib(seen),
        "changes_s": _timed(lambda: cluster_delta.changes(sent, new), repeat),
        "per_page_changes_s": _timed(per_page, repeat),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--pending-per-node", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5, help="reads per size (median reported)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    django_on_fresh_database(parser)
    rows = []
    for n in args.nodes:
        rows.append(measure(n, n * args.pending_per_node, args.repeat, args.seed))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "cluster_page", "results": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What reading one long job log costs the portal: the job page, the API and the live page's first read.

Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python benchmarks/log_reads.py [--lines 300000] [--batch 500] [--repeat 5] [--vacuum] [--json FILE]

Builds a fresh database ``<DATABASE_URL name>_bench`` (dropped and made again), one job with one
attempt whose stored log has ``--lines`` lines of 100 bytes in rows of ``--batch`` lines (as the
node streams a chatty job: 300,000 lines is about 30 MB, forty minutes of a job printing at the
streaming rate), then reads it as the portal does, ``--repeat`` times each (median wall time; the
peak of Python's allocations, tracemalloc, in one more run):

* ``job_page``: ``GET /jobs/<id>/``, the HTML page with the log's last lines;
* ``live_first_read``: what the job page's socket sends on connecting
  (``portal.dashboard.job_page.log_chunks_after``, from the start);
* ``api_first_page``: ``GET /api/v1/jobs/<id>/logs/`` as ``gpusched logs`` first asks it
  (``bytes``: the answer's size);
* ``api_poll_at_end``: the same with ``offset`` 100 lines before the end, as ``gpusched logs
  --follow`` polls a running job.

``--vacuum`` runs ``VACUUM ANALYZE`` on the log table after storing the log and before reading it, as
PostgreSQL's autovacuum will have done by the time a job has written that much (its insert
threshold is a fifth of the table); without it the reads find a table vacuum has never seen.

The same script runs in any tree that has these URLs, so a change is measured side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.api_submit_rate import in_process_bench_django  # noqa: E402

LINE = "x" * 89  # with "line NNNNNN " and the newline: 100 bytes a line


def _store_log(lines: int, batch: int) -> tuple[int, str]:
    """A user, a running job with one attempt and its log; (job id, API token)."""
    from django.contrib.auth.models import User

    from portal.models import ApiToken
    from scheduler.models import Attempt, AttemptLog, Job

    owner = User.objects.create_user("reader", "reader@example.org", "a-long-bench-password-42")
    job = Job.objects.create(owner=owner, name="chatty", command="python train.py", num_gpus=1, state="RUNNING")
    attempt = Attempt.objects.create(job=job, number=1, state="RUNNING")
    rows = ("\n".join(f"line {n:06d} {LINE[:88]}" for n in range(first, min(first + batch, lines)))
            for first in range(0, lines, batch))
    AttemptLog.objects.bulk_create((AttemptLog(attempt=attempt, text=text) for text in rows), batch_size=200)
    return job.pk, ApiToken.issue(owner, "bench")[1]


def _timed(read, repeat: int) -> dict:  # noqa: ANN001
    walls = []
    for _ in range(repeat):
        began = time.perf_counter()
        size = read()
        walls.append(time.perf_counter() - began)
    tracemalloc.start()
    read()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"wall_ms_median": round(1000 * statistics.median(walls), 1), "peak_alloc_mb": round(peak / 2**20, 1),
            "bytes": size}


def measure(lines: int, batch: int, repeat: int, vacuum: bool = False) -> dict:
    from django.test import Client

    from portal.dashboard import job_page

    job_id, token = _store_log(lines, batch)
    if vacuum:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE scheduler_attemptlog")
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    from django.contrib.auth.models import User

    browser = Client()
    browser.force_login(User.objects.get(username="reader"))

    def get(c, url: str, **params) -> int:  # noqa: ANN001
        answer = c.get(url, params)
        if answer.status_code != 200:
            raise SystemExit(f"{url} answered {answer.status_code}: {answer.content[:300]!r}")
        return len(answer.content)

    def live() -> int:
        found = job_page.log_chunks_after(job_id, 1, None)[0]
        return sum(len(line) + 1 for line in found)

    return {
        "lines": lines, "batch": batch, "repeat": repeat, "vacuum": vacuum,
        "job_page": _timed(lambda: get(browser, f"/jobs/{job_id}/"), repeat),
        "live_first_read": _timed(live, repeat),
        "api_first_page": _timed(lambda: get(client, f"/api/v1/jobs/{job_id}/logs/"), repeat),
        "api_poll_at_end": _timed(lambda: get(client, f"/api/v1/jobs/{job_id}/logs/", offset=lines - 100), repeat),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=500, help="lines per stored row")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--vacuum", action="store_true", help="VACUUM ANALYZE the log table before reading")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = parser.parse_args(argv)
    in_process_bench_django()
    result = {"benchmark": "log_reads", **measure(args.lines, args.batch, args.repeat, args.vacuum)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

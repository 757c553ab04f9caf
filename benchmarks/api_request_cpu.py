"""One job submission's cost inside the portal process, without a web server: where its milliseconds go.

Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python benchmarks/api_request_cpu.py [--requests 300] [--profile 30] [--json FILE]

Builds a fresh database ``<DATABASE_URL name>_bench`` (dropped and made again, as
``benchmarks/api_submit_rate.py`` does) with two nodes of 8 GPUs and one user with an API
token, then POSTs ``--requests`` single jobs to ``/api/v1/jobs/`` through Django's test
client in this process (after 30 unmeasured ones) and reports:

* ``cpu_ms_per_request``: this process's CPU time (user + system) per request, mean;
* ``wall_ms``: median and p95 of one request's wall time;
* ``sql_statements``: the statements one request sends, and their text (first 120 characters);
* ``serialize_cpu_ms``: the CPU of ``JobSerializer(job).data`` for one job with its attempts and
  events already read (as a submission's answer has them), mean of 300;
* with ``--profile N``: the N functions of most cumulative time in a cProfile of the requests.

What it leaves out, by design: the ASGI server (daphne), the network, the clients and the
worker's scheduling of the jobs, which ``benchmarks/api_submit_rate.py`` measures as a whole.
Scheduling requests are not sent (``SCHEDULER_AUTORUN=0``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.api_submit_rate import _setup_cluster, in_process_bench_django  # noqa: E402

WARM_UP = 30


def _post(client, headers: dict, i: int) -> object:  # noqa: ANN001
    answer = client.post("/api/v1/jobs/", {"name": f"cpu-{i}", "command": "true", "job_class": "BE", "num_gpus": 1,
                                           "grace_period": 0}, content_type="application/json", **headers)
    if answer.status_code != 201:
        raise SystemExit(f"submission {i} answered {answer.status_code}: {answer.content[:300]!r}")
    return answer


def measure(requests: int, profile: int) -> dict:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from portal.api.serializers import JobSerializer
    from scheduler.models import Job

    client, headers = Client(), {"HTTP_AUTHORIZATION": f"Token {_setup_cluster(1)[0]}"}
    for i in range(WARM_UP):
        _post(client, headers, i)
    with CaptureQueriesContext(connection) as captured:
        _post(client, headers, WARM_UP)
    statements = [q["sql"][:120] for q in captured.captured_queries]  # the next request clears the log
    walls, cpu_before = [], time.process_time()
    for i in range(requests):
        began = time.perf_counter()
        _post(client, headers, 1000 + i)
        walls.append(time.perf_counter() - began)
    cpu = time.process_time() - cpu_before
    # As a submission answers it: the job with its attempts and events at hand (no query while serializing).
    job = Job.objects.select_related("owner", "image", "project").prefetch_related("attempts", "events") \
        .order_by("-pk").first()
    serialize = []
    for _ in range(300):
        began = time.process_time()
        JobSerializer(job).data  # noqa: B018 - building the answer is what is timed
        serialize.append(time.process_time() - began)
    result = {
        "requests": requests,
        "cpu_ms_per_request": round(1000 * cpu / requests, 2),
        "wall_ms": {"p50": round(1000 * statistics.median(walls), 2),
                    "p95": round(1000 * sorted(walls)[int(0.95 * (len(walls) - 1))], 2)},
        "sql_statements": {"count": len(statements), "text": statements},
        "serialize_cpu_ms": round(1000 * statistics.fmean(serialize), 3),
    }
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for i in range(requests):
            _post(client, headers, 100_000 + i)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(profile)
        result["profile"] = text.getvalue()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print a cProfile's top N functions")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = parser.parse_args(argv)
    in_process_bench_django()
    result = measure(args.requests, args.profile)
    profile = result.pop("profile", None)
    text = json.dumps(result, indent=2)
    print(text)
    if profile:
        print(profile)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A burst of job submissions through the REST API from several client processes, and its audit.

``burst(base_url, tokens, total, clients)`` runs ``clients`` processes, each with
its own keep-alive HTTP session and API token, which together POST ``total``
jobs to ``/api/v1/jobs/`` as fast as the server answers. Every request carries
a unique job name (``load-<run>-<client>-<n>``) so the audit can tell, for
each request, whether the job was stored, and how many times. A request is
*accepted* when the server answered 201 with the job's id.

``audit(rows, result)`` compares the accepted requests with the stored rows:
every accepted name stored exactly once under the id the server gave, no
stored job that nobody submitted, no duplicate.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import requests

COMMAND = "true"


@dataclass
class ClientResult:
    accepted: dict[str, int] = field(default_factory=dict)  # name -> job id from the 201
    statuses: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0  # the client process's own CPU time over its requests


@dataclass
class BurstResult:
    total: int
    clients: int
    seconds: float
    accepted: dict[str, int]
    statuses: Counter
    errors: list[str]
    latencies: list[float]
    client_cpu_seconds: float = 0.0  # the client processes' CPU time over their requests, together

    @property
    def rate(self) -> float:
        """Accepted submissions per second over the whole burst."""
        return len(self.accepted) / self.seconds if self.seconds > 0 else 0.0


def _job(name: str, i: int) -> dict:
    return {"name": name, "command": COMMAND, "job_class": "TE" if i % 4 == 0 else "BE", "num_gpus": 1,
            "grace_period": 0}


def _client(base_url: str, token: str, names: list[str], per_request: int, start_at: float,
            out: multiprocessing.Queue) -> None:
    """POST ``names`` one job per request, or ``per_request`` jobs per job-array request (> 0)."""
    result = ClientResult()
    session = requests.Session()
    session.headers.update({"Authorization": f"Token {token}", "Content-Type": "application/json"})
    url = f"{base_url}/api/v1/jobs/array/" if per_request else f"{base_url}/api/v1/jobs/"
    step = per_request or 1
    while time.time() < start_at:  # all clients start together
        time.sleep(0.001)
    cpu_at_start = time.process_time()
    for first in range(0, len(names), step):
        chunk = names[first:first + step]
        jobs = [_job(name, first + i) for i, name in enumerate(chunk)]
        began = time.perf_counter()
        try:
            response = session.post(url, json={"jobs": jobs} if per_request else jobs[0], timeout=120)
        except requests.RequestException as exc:
            result.statuses["error"] += 1
            result.errors.append(f"{chunk[0]}: {type(exc).__name__}: {exc}"[:300])
            continue
        result.latencies.append(time.perf_counter() - began)
        result.statuses[response.status_code] += 1
        if response.status_code == 201:
            answered = response.json()["jobs"] if per_request else [response.json()]
            for name, job in zip(chunk, answered, strict=True):
                result.accepted[name] = job["id"]
        elif len(result.errors) < 20:
            result.errors.append(f"{chunk[0]}: {response.status_code} {response.text[:200]}")
    result.cpu_seconds = time.process_time() - cpu_at_start
    out.put(result)


def burst(base_url: str, tokens: list[str], total: int, clients: int, per_request: int = 0) -> BurstResult:
    """Submit ``total`` jobs from ``clients`` processes (tokens used round-robin); see the module doc.
    ``per_request`` > 0 sends them as job arrays of that many jobs (POST /api/v1/jobs/array/)."""
    run = uuid.uuid4().hex[:8]
    names = [[f"load-{run}-{c}-{n}" for n in range(c, total, clients)] for c in range(clients)]
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()
    start_at = time.time() + 2.0  # after every client process has imported requests
    procs = [ctx.Process(target=_client,
                         args=(base_url, tokens[c % len(tokens)], names[c], per_request, start_at, out))
             for c in range(clients)]
    for p in procs:
        p.start()
    results = [out.get(timeout=3600) for _ in procs]
    ended = time.time()
    for p in procs:
        p.join(timeout=60)
    accepted: dict[str, int] = {}
    statuses: Counter = Counter()
    errors: list[str] = []
    latencies: list[float] = []
    for r in results:
        accepted.update(r.accepted)
        statuses.update(r.statuses)
        errors.extend(r.errors)
        latencies.extend(r.latencies)
    # The burst ends when the last client has its last answer, close to ``ended``.
    return BurstResult(total, clients, ended - start_at, accepted, statuses, errors, latencies,
                       sum(r.cpu_seconds for r in results))


def audit(rows: list[tuple[int, str]], result: BurstResult) -> list[str]:
    """Problems between the stored ``(id, name)`` rows of this burst and what the clients were told."""
    problems = []
    counts = Counter(name for _, name in rows)
    ids = {name: pk for pk, name in rows}
    for name, count in counts.items():
        if count > 1:
            problems.append(f"{name} stored {count} times")
    for name, pk in result.accepted.items():
        if name not in ids:
            problems.append(f"{name} accepted as job {pk} but not stored")
        elif ids[name] != pk:
            problems.append(f"{name} accepted as job {pk} but stored as {ids[name]}")
    extra = set(ids) - set(result.accepted)
    if extra:
        problems.append(f"{len(extra)} stored jobs were not acknowledged with a 201, e.g. {sorted(extra)[:3]}")
    return problems

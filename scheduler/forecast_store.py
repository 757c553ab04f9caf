"""Where the live start-time forecasts are kept: one Redis hash.

A forecast is recomputed for every pending job at once (``scheduler.forecasts``)
and read one job or one page at a time (the job page, the API, the CLI), so
it lives in a Redis hash rather than in a column of ``Job``: replacing 10,000
entries is one ``MULTI`` (delete and refill), needs no migration and no row
lock against the scheduling cycle that writes the same jobs.

``HASH_KEY`` maps a job id to JSON ``{"start": epoch seconds or null, "position":
n}``; ``AT_KEY`` holds the epoch seconds the forecasts were computed at. A job
missing from the hash has no forecast (not pending when last computed, or
never computed yet). ``start`` null: not started within the forecast's
horizon (``scheduler.sim.forecast``). ``HEADS_KEY`` maps each job class to
the JSON list of the ids at the head of its queue (the first
``HEAD_LENGTH``, in queue order), so that a page listing the queue shows the
order the scheduler considers (fair share reorders it) without reading every
pending job's position.

A forecast is advice: while Redis cannot be reached, reads answer "no
forecast" (and log it) instead of failing the page or the submission that
shows them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import redis

from scheduler import coordination

log = logging.getLogger(__name__)

HASH_KEY = "gpusched:forecasts"
AT_KEY = "gpusched:forecasts:computed-at"
HEADS_KEY = "gpusched:forecasts:queue-heads"

HEAD_LENGTH = 200
"""Ids kept per class in ``HEADS_KEY``: as many as the cluster page lists."""


@dataclass(frozen=True, slots=True)
class StoredForecast:
    """One pending job's forecast: start (epoch seconds; None: past the horizon),
    1-based position in its class's queue, and when it was computed."""

    start: float | None
    position: int
    computed_at: float

    @property
    def start_at(self) -> datetime | None:
        """``start`` as an aware UTC datetime (None: past the horizon)."""
        return datetime.fromtimestamp(self.start, tz=timezone.utc) if self.start is not None else None

    @property
    def computed(self) -> datetime:
        """``computed_at`` as an aware UTC datetime."""
        return datetime.fromtimestamp(self.computed_at, tz=timezone.utc)

    def as_json(self) -> dict:
        """``{"start": ISO 8601 or null, "position": n, "computed_at": ISO 8601}`` (UTC)."""
        return {"start": _iso(self.start) if self.start is not None else None, "position": self.position,
                "computed_at": _iso(self.computed_at)}


def write(entries: Mapping[int, tuple[float | None, int]], computed_at: float,
          heads: Mapping[str, Sequence[int]] | None = None) -> set[int]:
    """Replace every stored forecast with ``entries`` (job id -> (start, position))
    and the queue heads with ``heads`` (job class -> ids in queue order, at most
    ``HEAD_LENGTH`` kept); return the ids whose forecast is new, changed or gone."""
    client = coordination.redis_client()
    old = client.hgetall(HASH_KEY)
    fresh = {str(k): json.dumps({"start": s, "position": p}, separators=(",", ":")) for k, (s, p) in entries.items()}
    changed = {int(k) for k, v in fresh.items() if _text(old.get(k.encode())) != v}
    changed |= {int(k) for k in old if k.decode() not in fresh}
    pipe = client.pipeline(transaction=True)
    pipe.delete(HASH_KEY)
    if fresh:
        pipe.hset(HASH_KEY, mapping=fresh)
    pipe.set(AT_KEY, repr(computed_at))
    pipe.delete(HEADS_KEY)
    if heads:
        pipe.hset(HEADS_KEY, mapping={cls: json.dumps([int(i) for i in ids[:HEAD_LENGTH]], separators=(",", ":"))
                                      for cls, ids in heads.items()})
    pipe.execute()
    return changed


def read(job_ids: Iterable[int]) -> dict[int, StoredForecast]:
    """The stored forecasts of these jobs (absent ids: none stored; Redis unreachable: none at all)."""
    ids = [int(i) for i in job_ids]
    if not ids:
        return {}
    pipe = coordination.redis_client().pipeline(transaction=True)
    pipe.get(AT_KEY)
    pipe.hmget(HASH_KEY, [str(i) for i in ids])
    try:
        at, values = pipe.execute()
    except redis.RedisError as exc:
        log.warning("forecasts unavailable, shown as none: %s", exc)
        return {}
    if at is None:
        return {}
    computed_at = float(at)
    out = {}
    for job_id, raw in zip(ids, values):
        if raw is not None:
            data = json.loads(raw)
            out[job_id] = StoredForecast(data["start"], int(data["position"]), computed_at)
    return out


def read_heads() -> dict[str, list[int]]:
    """Each job class's queue head as last stored (class -> ids in queue order); empty when none
    is stored or Redis cannot be reached."""
    try:
        raw = coordination.redis_client().hgetall(HEADS_KEY)
    except redis.RedisError as exc:
        log.warning("queue order unavailable, shown by priority and arrival: %s", exc)
        return {}
    return {cls.decode(): [int(i) for i in json.loads(ids)] for cls, ids in raw.items()}


def read_one(job_id: int) -> StoredForecast | None:
    """The stored forecast of one job, or None."""
    return read([job_id]).get(int(job_id))


def attach(jobs: Iterable) -> None:
    """Set ``forecast`` (a ``StoredForecast`` or None) on each job object of a page,
    in one Redis round trip; only a PENDING job gets one."""
    jobs = list(jobs)
    found = read(j.pk for j in jobs if j.state == "PENDING")
    for job in jobs:
        job.forecast = found.get(job.pk)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _text(raw: bytes | None) -> str | None:
    return raw.decode() if raw is not None else None

"""Reading telemetry for the node page, the job page and their JSON endpoints.

Series come back as columns ready for a chart: ``{"t": [...], "util": [...],
...}`` (``t`` in Unix seconds), from the finest ring tier that covers the
window asked for (``store.tier_for``). The caller checks that the viewer may
see the node or the job. While Redis cannot be reached the readers answer with
no readings and ``"unavailable": true`` (and log why): the pages stay up.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

import redis

from cluster.models import Gpu
from gputelemetry import store
from gputelemetry.services import client

log = logging.getLogger(__name__)

#: Windows (seconds) a page may ask for: one per ring tier.
WINDOWS = tuple(step * slots for step, slots in store.TIERS)
SERIES = ("util", "temp", "power", "fb_used", "proc_mem")


def clamp_window(value: Any) -> int:
    """``value`` as a window of ``WINDOWS`` (the smallest that covers it); the first for anything unreadable."""
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        return WINDOWS[0]
    return next((w for w in WINDOWS if w >= seconds), WINDOWS[-1])


def _columns(points: list[store.Point]) -> dict[str, list]:
    rows = [asdict(p) for p in points]
    return {"t": [r["t"] for r in rows], **{name: [r[name] for r in rows] for name in SERIES}}


def _latest(raw: bytes | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        return dict(zip(store.LATEST_FIELDS, json.loads(raw)))
    except ValueError:
        return None


def node_telemetry(node: str, now: float, window: int) -> dict[str, Any]:
    """Every GPU of ``node`` (database rows), each with its latest reading, last Xid, health and series."""
    gpus = list(Gpu.objects.filter(node__name=node).order_by("index").values(
        "index", "model_name", "healthy", "unhealthy_reason", "allocated_to_id"))
    try:
        rings, (latest, xids) = _read_node(node, [g["index"] for g in gpus])
        unavailable = False
    except redis.RedisError as exc:
        log.warning("telemetry of node %s not read: %s", node, exc)
        rings, latest, xids, unavailable = [None] * len(gpus), {}, {}, True
    tier = store.tier_for(window)
    out = []
    for g, ring in zip(gpus, rings):
        key = str(g["index"]).encode()
        out.append({
            "index": g["index"], "model": g["model_name"], "healthy": g["healthy"],
            "unhealthy_reason": g["unhealthy_reason"], "busy": g["allocated_to_id"] is not None,
            "latest": _latest(latest.get(key)),
            "last_xid": int(xids[key]) if key in xids else None,
            "series": _columns(store.unpack(ring, now, tier)),
        })
    return {"node": node, "window": window, "step": store.TIERS[tier][0], "gpus": out, "unavailable": unavailable}


def _read_node(node: str, indices: list[int]) -> tuple[list[bytes | None], tuple[dict, dict]]:
    """The rings of ``node``'s GPUs ``indices``, and its (latest readings, last Xids) hashes."""
    conn = client()
    pipe = conn.pipeline(transaction=False)
    for index in indices:
        pipe.get(store.gpu_key(node, index))
    rings = pipe.execute() if indices else []
    return rings, store.read_latest(conn, [node])[node]


def job_telemetry(job_id: int, attempts: list[int], now: float, window: int) -> dict[str, Any] | None:
    """The job-level series of the newest of ``attempts`` that has any; None when none has (with
    ``"unavailable": true`` and no series when Redis cannot be reached)."""
    tier = store.tier_for(window)
    try:
        rings = client().mget([store.job_key(job_id, number) for number in sorted(attempts, reverse=True)]) \
            if attempts else []
    except redis.RedisError as exc:
        log.warning("telemetry of job %s not read: %s", job_id, exc)
        return {"attempt": None, "window": window, "series": None, "unavailable": True}
    for number, ring in zip(sorted(attempts, reverse=True), rings):
        points = store.unpack(ring, now, tier)
        if points:
            return {"attempt": number, "window": window, "step": store.TIERS[tier][0], "series": _columns(points)}
    return None

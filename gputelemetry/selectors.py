"""Reading telemetry for the node page, the job page and their JSON endpoints.

Series come back as columns ready for a chart: ``{"t": [...], "util": [...],
...}`` (``t`` in Unix seconds), from the finest ring tier that covers the
window asked for (``store.tier_for``). The caller checks that the viewer may
see the node or the job.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from cluster.models import Gpu
from gputelemetry import store
from gputelemetry.services import client

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
    conn = client()
    pipe = conn.pipeline(transaction=False)
    for g in gpus:
        pipe.get(store.gpu_key(node, g["index"]))
    rings = pipe.execute() if gpus else []
    latest, xids = store.read_latest(conn, [node])[node]
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
    return {"node": node, "window": window, "step": store.TIERS[tier][0], "gpus": out}


def job_telemetry(job_id: int, attempts: list[int], now: float, window: int) -> dict[str, Any] | None:
    """The job-level series of the newest of ``attempts`` that has any; None when none has."""
    conn = client()
    tier = store.tier_for(window)
    for number in sorted(attempts, reverse=True):
        points = store.unpack(conn.get(store.job_key(job_id, number)), now, tier)
        if points:
            return {"attempt": number, "window": window, "step": store.TIERS[tier][0], "series": _columns(points)}
    return None

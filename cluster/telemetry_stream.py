"""The telemetry stream: how agents hand GPU telemetry reports to the server, many per round trip.

Every other report is a Celery task message, handled one by one; telemetry is
the one report every node sends every few seconds, and at a thousand nodes
Celery's per-message work (receive, decode, trace, acknowledge) cost the
worker about twenty times what storing the report costs. So an agent whose
broker is Redis appends its telemetry report to a Redis stream instead
(``XADD``, the same JSON fields as ``protocol.REPORT_TELEMETRY``'s kwargs, signature
included), and the server reads it in batches of hundreds through a consumer
group (``gputelemetry.drain``): one round trip, one authentication check per
report, one pipeline of writes per batch.

The stream is capped (``MAX_ENTRIES``, trimmed approximately by every ``XADD``):
with no server reading it (a stopped worker) it keeps the newest reports and
never grows beyond that, as a time series that no one reads should. A report
that carries health events (``carries_events``: new uncorrectable ECC errors,
Xid events) is not appended: each such event is sent once, and trimming would
lose it, so the agent sends that report as the task, whose queue is never
trimmed (such reports are rare; their cost does not matter). An agent
whose broker is not Redis sends the Celery task, which the server still
handles, as it does for agents from before the stream.

Both sides import this module; it imports neither Django nor Celery.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

STREAM_KEY = "gpusched:telemetry-stream"
GROUP = "ingest"
FIELD = "report"
#: About 50 s of reports of a thousand nodes at the default 5 s interval; 2 KiB each for 8 GPUs.
MAX_ENTRIES = 10_000
#: A report of 64 GPUs and 64 jobs (the schema's limits) is about 20 KiB; anything much larger is hostile.
MAX_ENTRY_BYTES = 64 * 1024
#: Broker URL schemes that name a Redis server (kombu's), and what redis-py calls them.
REDIS_SCHEMES = {"redis": "redis", "rediss": "rediss", "unix": "unix", "redis+socket": "unix", "socket": "unix"}


def redis_url(broker_url: str) -> str | None:
    """The redis-py URL of the Redis server behind ``broker_url``; None when the broker is not Redis."""
    scheme = urlparse(broker_url).scheme
    if scheme not in REDIS_SCHEMES:
        return None
    return REDIS_SCHEMES[scheme] + broker_url[len(scheme):]


def encode(kwargs: dict[str, Any]) -> dict[str, str]:
    """The stream entry of one report (its kwargs as one JSON field)."""
    return {FIELD: json.dumps(kwargs, separators=(",", ":"))}


def publish(client: Any, kwargs: dict[str, Any]) -> None:
    """Append one report to the stream (``client``: a redis-py client), trimming the oldest past ``MAX_ENTRIES``."""
    client.xadd(STREAM_KEY, encode(kwargs), maxlen=MAX_ENTRIES, approximate=True)


def carries_events(kwargs: dict[str, Any]) -> bool:
    """Whether a report carries health events that are sent only once: a GPU with new
    uncorrectable ECC errors (``ecc_dbe_new``) or Xid events (``xid``)."""
    gpus = kwargs.get("gpus")
    if not isinstance(gpus, list):
        return False
    return any(isinstance(g, dict) and (g.get("xid") or g.get("ecc_dbe_new")) for g in gpus)

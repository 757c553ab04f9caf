"""This server's cluster id, in every command to an agent and checked in every report from one.

Job ids start again at 1 in a new database. An agent keeps what it saw in its work dir (the newest
attempt of each job, to refuse a stale launch; its recent exits, repeated in heartbeats; reports not
yet delivered), so after its server's database was replaced (a new one, a reset, the agent moved to
another cluster) it refused the new job 1's first launches as stale and its heartbeats repeated the
old job 1's exit, which the server took for the new one's. Now every command carries ``cluster_id``
(``FIELD``); an agent that sees an id other than the one its memory belongs to stops that cluster's
attempts, forgets it and tags its reports with the new id (``cluster.agent.cluster_switch``).
Reports naming another cluster are ignored here, but for registrations (who the node is) and
telemetry; a heartbeat naming another cluster is answered with a request to register again, which
carries this server's id, so the agent learns it.

A report without the field comes from an agent that has not yet been told an id (or from one of
the previous version) and is accepted as before.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from cluster import protocol
from cluster.protocol_versions import CLUSTER_ID_FIELD as FIELD

__all__ = ("FIELD", "cluster_id", "known_id", "names_another", "log_ignored", "forget", "ANY_CLUSTER")

log = logging.getLogger(__name__)

#: Reports accepted whatever cluster they name: who the node is, and what its GPUs measure.
ANY_CLUSTER = frozenset({protocol.REPORT_REGISTER, protocol.REPORT_TELEMETRY})
#: A node's reports for another cluster are logged at most this often per worker process.
LOG_INTERVAL_S = 60.0
_last_logged: dict[str, float] = {}


@functools.cache
def cluster_id() -> str:
    """This database's id (read once per process; created if the row is missing)."""
    from cluster.models import ServerIdentity

    row, _ = ServerIdentity.objects.get_or_create(pk=1, defaults={"uuid": str(uuid.uuid4())})
    return row.uuid


def known_id() -> str | None:
    """``cluster_id()``, or None when the database cannot be read: a command then goes without the
    field, and an agent acts on it as on any command that names no cluster."""
    from django.db import DatabaseError

    try:
        return cluster_id()
    except DatabaseError:
        return None


def names_another(kwargs: Mapping[str, Any]) -> str | None:
    """The cluster id a report names when it is not this server's, else None (none named: accepted)."""
    named = kwargs.get(FIELD)
    if not named or not isinstance(named, str):
        return None
    return None if named == cluster_id() else named


def forget() -> None:
    """Read the id again on next use (tests that replace the row)."""
    cluster_id.cache_clear()


def log_ignored(task: str, node: str, named: str) -> None:
    """Say (at most once a minute per node) that a report naming another cluster was dropped; the
    caller answers a heartbeat with a request to register again, whose command carries this id."""
    now = time.monotonic()
    if now - _last_logged.get(node, -LOG_INTERVAL_S) >= LOG_INTERVAL_S:
        _last_logged[node] = now
        log.warning("%s from node %s ignored: it names cluster %s, and this server's database is cluster %s "
                    "(the agent remembers another database's jobs; it forgets them when told this id)",
                    task, node, named, cluster_id())

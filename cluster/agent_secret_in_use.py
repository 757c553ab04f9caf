"""Which agent secret each node's agent signs with, while ``GPUSCHED_AGENT_SECRET`` is being rotated.

During a rotation the server accepts reports signed with a token under the new secret or under any
of ``GPUSCHED_AGENT_SECRET_FALLBACKS`` (``cluster.auth``), since agents are given their new tokens
one at a time. Commands must then go signed with the token the node's agent holds, or the agent
refuses them: so the secret that verified a node's latest report is noted here, in Redis, where
every worker that sends commands reads it. What is stored is a fingerprint of the secret (a
truncated SHA-256 under a label of its own), never the secret or a token.

Only used while fallbacks are configured; outside a rotation nothing is read or written.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence

import redis

from scheduler.coordination import redis_client

log = logging.getLogger(__name__)

KEY = "gpusched:agent-secret-in-use"
# A worker notes a node's secret again after this long even if it has not changed, so that a Redis
# that lost the key (restarted without persistence) has it back within one heartbeat or so.
RENOTE_SECONDS = 30.0

_noted: dict[str, tuple[str, float]] = {}


def fingerprint(secret: str) -> str:
    return hashlib.sha256(b"gpusched-agent-secret-fingerprint:" + secret.encode()).hexdigest()[:16]


def note(node: str, secret: str) -> None:
    """Record that ``node``'s latest authentic report was signed under ``secret`` (skipped when this
    process wrote the same less than RENOTE_SECONDS ago). A Redis error is logged, never raised:
    the report itself is authentic."""
    mark, now = fingerprint(secret), time.monotonic()
    last = _noted.get(node)
    if last is not None and last[0] == mark and now - last[1] < RENOTE_SECONDS:
        return
    try:
        redis_client().hset(KEY, node, mark)
    except redis.RedisError as exc:
        log.warning("could not note the agent secret node %s signs with: %s", node, exc)
        return
    _noted[node] = (mark, now)


def secret_of(node: str, candidates: Sequence[str]) -> str:
    """The one of ``candidates`` (the current secret first, then the fallbacks, the previous one first)
    that ``node``'s agent last signed with. When nothing was noted for it, or the noted one is no
    longer accepted, or Redis cannot say: the previous secret, since every report before the
    rotation began was signed under it, and an agent given its new token reports (its registration)
    before it is sent anything, which notes the new one."""
    default = candidates[1] if len(candidates) > 1 else candidates[0]
    try:
        mark = redis_client().hget(KEY, node)
    except redis.RedisError as exc:
        log.warning("could not read the agent secret node %s signs with (signing with the previous one): %s",
                    node, exc)
        return default
    if mark is not None:
        for secret in candidates:
            if fingerprint(secret) == mark.decode():
                return secret
    return default


def forget_cache() -> None:
    """Drop this process's memory of what it wrote (tests; a new Redis)."""
    _noted.clear()


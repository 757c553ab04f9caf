"""One read of the cluster's shared state per change for all the portal's processes, through Redis.

Every portal process (``WEB_PROCESSES``) serves its own cluster pages, and each read the whole cluster
after each change: 0.19 s of a core per process at 1,000 nodes. Now one process reads and stores what
it read in Redis; the others take it from there (a JSON decode, tens of milliseconds).

Freshness without clocks: every hint to the cluster pages first increments ``SEQ_KEY``
(``portal.realtime``, after the change committed). A reader notes the counter before it reads the
database, and stores its state with that number; a state stored with a number at least the counter's
value when a caller asks began after every change announced by then, so it shows them. A state older
than ``MAX_AGE_S`` is read again anyway, for the figures that move with time alone (utilization).

One reader at a time (a Redis lock); the others wait for its state up to ``WAIT_S`` and then read for
themselves. Without Redis every process reads for itself, as before: the cache only saves work.
The state is kept in Redis beside the broker's messages, never sent to a browser as it is: each page
still gets only what its viewer may see (``selectors.for_viewer``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

import redis
import redis.asyncio
from django.conf import settings

from portal.env import env_bool

log = logging.getLogger(__name__)

#: ``CLUSTER_STATE_SHARED=false`` makes this process read for itself (a Django setting of the same
#: name overrides it: the unit tests keep it off, so that no test is served another's state).
SHARED_BY_DEFAULT = env_bool("CLUSTER_STATE_SHARED", True)
SEQ_KEY = "gpusched:cluster:seq"
STATE_KEY = "gpusched:cluster:state"
LOCK_KEY = "gpusched:cluster:reading"
#: A stored state older than this is not served (seconds): the page's time-based figures must move.
MAX_AGE_S = 10.0
#: How long a process waits for another's read before reading itself (seconds).
WAIT_S = 2.0
_POLL_S = 0.02
_LOCK_MS = 10_000  # a reader that died holding the lock holds it no longer than this
# Stores only a state no older than the one stored: a slow reader must not replace a newer state.
_STORE_IF_NEWER = """
local stored = tonumber(redis.call('HGET', KEYS[1], 'seq') or '-1')
if stored <= tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'at', ARGV[2], 'state', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
return 0
"""
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def enabled() -> bool:
    """Whether this process takes and stores shared states (it counts changes either way)."""
    return bool(getattr(settings, "CLUSTER_STATE_SHARED", SHARED_BY_DEFAULT))


@functools.lru_cache(maxsize=4)
def _counter_for(url: str) -> redis.Redis:
    # Short time-outs: the count is made on every write path's commit, which must not hang on Redis.
    return redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)


def announce_change() -> None:
    """Count one more change of the cluster (called before its hint is sent). Always, whatever
    ``enabled()`` says here: a process that shares no states still wakes pages of processes that do."""
    _counter_for(settings.REDIS_URL).incr(SEQ_KEY)


async def shared_state(read: Callable[[], Awaitable[dict]]) -> dict:
    """The cluster's shared state showing every change announced so far: stored by another process, or
    ``await read()`` (then stored for the others). Waits on the event loop, never in a thread that
    serves database work; JSON is encoded and decoded in a worker thread (1 MB at 1,000 nodes)."""
    if not enabled():
        return await read()
    try:
        client = _client()
        need = int(await client.get(SEQ_KEY) or 0)
        deadline = time.monotonic() + WAIT_S
        while True:
            state = await _stored(client, need)
            if state is not None:
                return state
            token = uuid.uuid4().hex
            if await client.set(LOCK_KEY, token, nx=True, px=_LOCK_MS):
                try:
                    return await _read_and_store(client, read)
                finally:
                    await client.eval(_RELEASE, 1, LOCK_KEY, token)
            if time.monotonic() >= deadline:  # another's read takes too long: not worth waiting more
                break
            await asyncio.sleep(_POLL_S)
    except redis.RedisError as exc:
        log.warning("cluster state cache unavailable (%s: %s); reading the cluster in this process",
                    type(exc).__name__, exc)
    return await read()


def stored_state() -> dict | None:
    """For a view (synchronous): the state another process stored when it shows every change announced
    so far and is young enough, else None (the caller reads for itself; a view stores nothing)."""
    if not enabled():
        return None
    client = _counter_for(settings.REDIS_URL)
    try:
        need = int(client.get(SEQ_KEY) or 0)
        seq, at = client.hmget(STATE_KEY, ["seq", "at"])
        if not _current(seq, at, need):
            return None
        text = client.hget(STATE_KEY, "state")
    except redis.RedisError:
        return None
    return None if text is None else json.loads(text)


def _current(seq: bytes | None, at: bytes | None, need: int) -> bool:
    """Whether a stored state (its number and read time) shows every change counted up to ``need`` and is
    young enough to serve."""
    return seq is not None and int(seq) >= need and time.time() - float(at) <= MAX_AGE_S


_clients: dict[asyncio.AbstractEventLoop, redis.asyncio.Redis] = {}


def _client() -> redis.asyncio.Redis:
    """This event loop's client (an asyncio client belongs to the loop it was made on)."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        for old in [other for other in _clients if other.is_closed()]:
            del _clients[old]
        client = _clients[loop] = redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=5,
                                                               socket_connect_timeout=2)
    return client


async def _stored(client: redis.asyncio.Redis, need: int) -> dict | None:
    # The state itself (a megabyte at 1,000 nodes) is fetched only once its number and age qualify: a
    # process waiting for another's read asks every 20 ms. A state that replaced it meanwhile is newer.
    seq, at = await client.hmget(STATE_KEY, ["seq", "at"])
    if not _current(seq, at, need):
        return None
    text = await client.hget(STATE_KEY, "state")
    return None if text is None else await asyncio.to_thread(json.loads, text)


async def _read_and_store(client: redis.asyncio.Redis, read: Callable[[], Awaitable[dict]]) -> dict:
    seq = int(await client.get(SEQ_KEY) or 0)  # before the read: every change counted by then is in it
    began = time.time()
    state = await read()
    text = await asyncio.to_thread(json.dumps, state, separators=(",", ":"))
    await client.eval(_STORE_IF_NEWER, 1, STATE_KEY, seq, began, text, int(MAX_AGE_S * 1000))
    return state
